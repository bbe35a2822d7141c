package admission

import "context"

// FlowSync shares the flows' service between the replicas of a gateway
// (package store keeps it in Redis or Valkey): SyncFlows adds deltas, the
// weighted token service each flow of model was charged on this replica
// since its last call, to the model's totals over every replica, and
// returns every flow's total.
type FlowSync interface {
	SyncFlows(ctx context.Context, model string, deltas map[string]float64) (map[string]float64, error)
}

// SyncFlows shares the pool's flows' service with the other replicas
// under Tokens fairness: it pushes what this replica charged each flow
// since the last sync and adds to each flow's counter what the others
// charged it meanwhile (the total's growth beyond this replica's own
// push), over its weight. A flow's first sync only takes the total as
// its base: service from before this replica knew the flow is not
// charged again. Called by one goroutine at a time, every sync interval;
// the counters of two replicas then differ by at most the service the
// others charged in one interval (and a round trip). When fs fails, the
// deltas stay for the next sync.
func (p *Pool) SyncFlows(ctx context.Context, fs FlowSync) error {
	p.mu.Lock()
	if !p.fair.on {
		p.unlock()
		return nil
	}
	var deltas map[string]float64
	for name, f := range p.fair.flows {
		p.counterLocked(f) // folds the output charged since
		if f.unpushed != 0 || !f.synced {
			if deltas == nil {
				deltas = make(map[string]float64, len(p.fair.flows))
			}
			deltas[name] = f.unpushed
			f.unpushed = 0
		}
	}
	p.unlock()
	totals, err := fs.SyncFlows(ctx, p.name, deltas)
	p.mu.Lock()
	defer p.unlock()
	if err != nil {
		for name, d := range deltas {
			p.fair.flows[name].unpushed += d
		}
		return err
	}
	for name, total := range totals {
		f := p.fair.flows[name]
		if f == nil {
			continue // not active here yet: based at its first sync
		}
		if f.synced {
			if others := total - f.seen - deltas[name]; others != 0 {
				f.vtc += others / f.weight
			}
		}
		f.seen, f.synced = total, true
	}
	return nil
}
