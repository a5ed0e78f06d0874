package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/config"
)

// emfRuleFlags adds --config and --rules to the flags of a command that
// writes the aggregator's EMF: the rules whose [Tier, Rule] documents are
// never folded into __other__ (aggregator.EMFOptions.Rules). The function
// it returns reads them; none means the busiest of each output
// (--rule-budget).
func emfRuleFlags(fs *flag.FlagSet) func() ([]string, error) {
	cfgPath := fs.String("config", "", "the edges' configuration `file`: each of its rules gets [Tier, Rule] EMF documents of its own in every window and partition, and rules it does not have are folded into __other__ (without it or --rules, each partition keeps its --rule-budget busiest, which may differ between shards)")
	rules := fs.String("rules", "", "rule ids kept as --config keeps its rules (comma-separated `list`, such as anonymous:global,pro:/api/search)")
	return func() ([]string, error) {
		var ids []string
		if *cfgPath != "" {
			cfg, err := config.Load(*cfgPath)
			if err != nil {
				return nil, err
			}
			ids = cfg.RuleIDs()
		}
		for id := range strings.SplitSeq(*rules, ",") {
			if id = strings.TrimSpace(id); id == "" {
				continue
			}
			if tier, rest, ok := strings.Cut(id, ":"); !ok || tier == "" || rest == "" {
				return nil, fmt.Errorf("--rules %q: want rule ids <tier>:global or <tier>:<path prefix>, such as anonymous:global", id)
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
}
