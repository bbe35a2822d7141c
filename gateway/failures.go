package gateway

import (
	"net/http"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// The failure table: every way a request the gateway serves can fail,
// one row each, wherever the failure is found (the door, the queue, a
// key's quota, the replicas' shared store, a backend, the client). A row's
// code is the failure's one name: the access log's outcome (a stream's
// stream_error), the metric label that counts it, triage's reason and the
// span's maitred.outcome all say it (TestFailureTableVocabulary). Where
// the client is told another code (wire), that is the envelope's "code",
// kept as it was for the clients and docs/errors.md.

// failure is one row of the failure table.
type failure struct {
	// code is the failure's name in the log, the metrics, triage and the
	// trace.
	code string
	// wire is the envelope's "code" the client gets; "" when it is code
	// (a door rejection's is the rejection's own code).
	wire   string
	status int
	// layer is where the request's progress stopped (the default: an
	// *Error built from the row may name another where it knows better).
	layer triage.Layer
	// retryable: the gateway may send the request to another backend
	// (the retry rule, retry.go).
	retryable bool
	// envType is the envelope's error type ("" for a failure the client
	// is sent no envelope for: it left, or the answer was already going).
	envType string
	source  failureSource
	// metric is the metric family that counts the failure by its code
	// (the label named in metricLabels); "" when only
	// maitred_failures_total (by layer) and maitred_requests_total (by
	// status) count it.
	metric string
}

// The metric families that count failures by code, and their label.
const (
	metricRejections    = "maitred_rejections_total"     // reason: the door's rejections and key checks
	metricAdmissions    = "maitred_admission_total"      // outcome: the queue's decisions
	metricBackendErrors = "maitred_backend_errors_total" // kind: a backend's failures before its headers
	metricStreamErrors  = "maitred_stream_errors_total"  // reason: streams broken after their 200
)

// failureSource is where a failure is found.
type failureSource string

const (
	fromDoor    failureSource = "door"
	fromQuota   failureSource = "quota"
	fromQueue   failureSource = "queue"
	fromStore   failureSource = "store"
	fromBackend failureSource = "backend"
	fromClient  failureSource = "client"
)

// wireCode is the code the client's envelope carries.
func (f *failure) wireCode() string {
	if f.wire != "" {
		return f.wire
	}
	return f.code
}

// err builds the gateway's answer for a failure of this row.
func (f *failure) err(msg string, cause error) *Error {
	e := &Error{Status: f.status, Type: f.envType, Code: f.wireCode(), Message: msg, Layer: f.layer, Cause: cause}
	if f.wire != "" {
		e.Outcome = f.code
	}
	return e
}

// The rows the gateway itself builds (the door's are doorFailures).
var (
	// The edge, before the door.
	failUnknownURL    = &failure{code: codeUnknownURL, status: http.StatusNotFound, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failMethod        = &failure{code: codeMethodNotAllowed, status: http.StatusMethodNotAllowed, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failFraming       = &failure{code: codeAmbiguousFraming, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failReadTimeout   = &failure{code: codeRequestTimeout, status: http.StatusRequestTimeout, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromClient}
	failBodyRead      = &failure{code: codeBodyRead, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromClient}
	failBusy          = &failure{code: codeServerBusy, status: http.StatusServiceUnavailable, layer: triage.LayerDoor, envType: typeServer, source: fromDoor}
	failInternal      = &failure{code: codeInternal, status: http.StatusInternalServerError, layer: triage.LayerDoor, envType: typeServer, source: fromDoor}
	failRequestID     = &failure{code: codeRequestIDNotAllowed, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failBackgroundReq = &failure{code: codeBackgroundNotAllowed, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	// POST /detokenize's own checks of its token list (detokenize.go).
	failInvalidType  = &failure{code: codeInvalidType, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failInvalidValue = &failure{code: codeInvalidValue, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	failMissingParam = &failure{code: codeMissingParam, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor}
	// The queue (a pool outcome other than admitted; queueLabel).
	failQueueFull    = &failure{code: codeQueueFull, status: http.StatusTooManyRequests, layer: triage.LayerQueue, envType: typeServer, source: fromQueue, metric: metricAdmissions}
	failQueueTimeout = &failure{code: codeQueueTimeout, status: http.StatusServiceUnavailable, layer: triage.LayerQueue, envType: typeServer, source: fromQueue, metric: metricAdmissions}
	failExceedsKV    = &failure{code: codeExceedsKV, status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromQueue, metric: metricAdmissions}
	failNotReady     = &failure{code: codeModelNotReady, status: http.StatusServiceUnavailable, layer: triage.LayerUnready, envType: typeServer, source: fromQueue, metric: metricAdmissions}
	failModelRemoved = &failure{code: outcomeModelRemoved, wire: codeModelNotFound, status: http.StatusNotFound, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromQueue, metric: metricAdmissions}
	// The replicas' shared store, down with on_store_error reject: in
	// the queue (layer gateway_queue) or a key's limits (layer door).
	failStoreDown = &failure{code: codeStoreDown, status: http.StatusServiceUnavailable, layer: triage.LayerQueue, envType: typeServer, source: fromStore, metric: metricAdmissions}
	// A backend, before its headers (classify) and after (a broken
	// answer), or its own 4xx.
	failConnect       = &failure{code: outcomeConnectFailed, wire: codeBackendDown, status: http.StatusBadGateway, layer: triage.LayerConnect, retryable: true, envType: typeServer, source: fromBackend, metric: metricBackendErrors}
	failBeforeHeaders = &failure{code: outcomeFailedBeforeHeaders, wire: codeBackendDown, status: http.StatusBadGateway, layer: triage.LayerConnect, envType: typeServer, source: fromBackend, metric: metricBackendErrors}
	failFirstByte     = &failure{code: codeBackendTimeout, status: http.StatusGatewayTimeout, layer: triage.LayerPrefill, envType: typeServer, source: fromBackend, metric: metricBackendErrors}
	failStalled       = &failure{code: codeStalled, status: http.StatusOK, layer: triage.LayerDecode, envType: typeServer, source: fromBackend, metric: metricStreamErrors}
	failDisconnected  = &failure{code: codeDisconnected, status: http.StatusOK, layer: triage.LayerDecode, envType: typeServer, source: fromBackend, metric: metricStreamErrors}
	failRejected      = &failure{code: outcomeBackendRejected, status: http.StatusBadRequest, layer: triage.LayerBackend, source: fromBackend}
	// The drain deadline: no failure of the request's own (layer none).
	failShuttingDown = &failure{code: codeShuttingDown, status: http.StatusServiceUnavailable, layer: triage.LayerNone, envType: typeServer, source: fromQueue, metric: metricAdmissions}
	// The client.
	failClientClosed = &failure{code: outcomeClientClosed, status: statusClientClosed, layer: triage.LayerClient, source: fromClient}
	// failClientGone: the client left while the request waited in the
	// queue (its name is maitred_admission_total's, which tests pin).
	failClientGone    = &failure{code: outcomeClientGone, status: statusClientClosed, layer: triage.LayerClient, source: fromQueue, metric: metricAdmissions}
	failClientStalled = &failure{code: outcomeClientStalled, status: statusClientClosed, layer: triage.LayerClient, source: fromClient}
	failAborted       = &failure{code: outcomeAborted, status: statusClientClosed, layer: triage.LayerClient, source: fromClient}
)

// doorFailures are the door's rejections and the key checks, one row per
// admission.Reason (the reason label of maitred_rejections_total); each
// rejection carries its own status and wire code, the row its usual ones.
var doorFailures = func() []*failure {
	out := make([]*failure, 0, len(admission.Reasons()))
	for _, r := range admission.Reasons() {
		f := &failure{code: r.String(), status: http.StatusBadRequest, layer: triage.LayerDoor, envType: typeInvalidRequest, source: fromDoor, metric: metricRejections}
		switch r {
		case admission.UnknownModel, admission.ModelNotAllowed:
			f.status, f.wire = http.StatusNotFound, codeModelNotFound
		case admission.TooLarge:
			f.status = http.StatusRequestEntityTooLarge
		case admission.UnsupportedMedia:
			f.status = http.StatusUnsupportedMediaType
		case admission.InvalidAPIKey:
			f.status = http.StatusUnauthorized
		case admission.RateLimited:
			f.status, f.wire, f.envType, f.source = http.StatusTooManyRequests, codeRateLimited, "tokens", fromQuota
		}
		out = append(out, f)
	}
	return out
}()

// failureTable is every row, the door's first.
var failureTable = append(doorFailures[:len(doorFailures):len(doorFailures)],
	failUnknownURL, failMethod, failFraming, failReadTimeout, failBodyRead, failBusy, failInternal, failRequestID, failBackgroundReq,
	failInvalidType, failInvalidValue, failMissingParam,
	failQueueFull, failQueueTimeout, failExceedsKV, failNotReady, failModelRemoved, failStoreDown,
	failConnect, failBeforeHeaders, failFirstByte, failStalled, failDisconnected, failRejected, failShuttingDown,
	failClientClosed, failClientGone, failClientStalled, failAborted,
)

// queueFailure is the row of a pool outcome other than Admitted (nil for
// Admitted): the failure the request gets, whose code is also the
// outcome label of maitred_admission_total and the queue span's.
func queueFailure(o admission.Outcome) *failure {
	switch o {
	case admission.QueueFull:
		return failQueueFull
	case admission.QueueTimeout:
		return failQueueTimeout
	case admission.ClientGone:
		return failClientGone
	case admission.OverBudget:
		return failExceedsKV
	case admission.NoBackend:
		return failNotReady
	case admission.Draining:
		return failShuttingDown
	case admission.StoreDown:
		return failStoreDown
	case admission.ModelRemoved:
		return failModelRemoved
	}
	return nil
}

// queueLabel is a pool outcome's label in maitred_admission_total and
// the queue span: admitted, or its failure's code.
func queueLabel(o admission.Outcome) string {
	if f := queueFailure(o); f != nil {
		return f.code
	}
	return o.String()
}
