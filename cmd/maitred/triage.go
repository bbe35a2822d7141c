package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/triage"
)

// cmdTriage prints a running gateway's triage report as text.
func cmdTriage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("maitred triage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "the base URL of the gateway's admin pages: admin_listen when set, else listen")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maitred triage [--url URL]\n\nNames the layer where slow or failing requests are stuck, with the evidence.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(*url, "/")+"/debug/triage", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %s", req.URL, res.StatusCode, body)
	}
	if *asJSON {
		_, err = stdout.Write(body)
		return err
	}
	var rep triage.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("unreadable report: %w", err)
	}
	printReport(stdout, rep)
	return nil
}

func printReport(w io.Writer, rep triage.Report) {
	fmt.Fprintf(w, "verdict: %s   (%d requests over %s)\n", rep.Verdict, rep.Requests, rep.Window)
	printEvidence(w, "  ", rep.Evidence)
	if len(rep.Next) > 0 {
		fmt.Fprintln(w, "inspect next:")
		for _, n := range rep.Next {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	for _, o := range rep.Others {
		fmt.Fprintf(w, "also: %s\n", o.Verdict)
	}
	for _, m := range rep.Models {
		fmt.Fprintf(w, "\nmodel %s: %s (%d requests)\n", m.Model, m.Verdict, m.Requests)
		for _, b := range m.Backends {
			flag := ""
			if b.SlowPathFallback {
				flag = "  [possible slow-path fallback]"
			}
			fmt.Fprintf(w, "  backend %s: %s %s%s\n", b.Backend, b.State, b.StateReason, flag)
		}
	}
}

func printEvidence(w io.Writer, indent string, ev map[string]any) {
	keys := make([]string, 0, len(ev))
	for k := range ev {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := json.Marshal(ev[k])
		fmt.Fprintf(w, "%s%s: %s\n", indent, k, v)
	}
}
