// dashboard-check validates Grafana dashboard JSON files against the dashboard schema with
// Grafana's own generated types (grafana-foundation-sdk, pinned in go.mod): a strict decode
// that fails on a missing required field, a value of the wrong type or an unknown field, in
// the dashboard and, with the SDK's panel and query plugins registered, in each panel's
// options, field config and Prometheus targets.
//
// Usage: dashboard-check FILE...   (exit 0: all valid; 1: errors, one per line; 2: usage)
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func check(path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var board dashboard.Dashboard
	err = board.UnmarshalJSONStrict(raw)
	if err == nil {
		err = board.Validate()
	}
	var built cog.BuildErrors
	if errors.As(err, &built) {
		// The SDK returns an empty BuildErrors (not nil) when nothing failed.
		out := make([]string, 0, len(built))
		for _, e := range built {
			out = append(out, fmt.Sprintf("%s: %s", path, e.Error()))
		}
		return out
	}
	if err != nil {
		return []string{fmt.Sprintf("%s: %s", path, err)}
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard-check FILE...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		for _, line := range check(path) {
			fmt.Println(line)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
