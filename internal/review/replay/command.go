package replay

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/cli"
)

// APIKeyEnv is the environment variable the command reads the API key from;
// no flag takes it, so that it never shows in a process list or a history.
const APIKeyEnv = "SYSTEMONE_API_KEY"

// Command returns the `replay` subcommand, for the binary to register
// (caddycmd.RegisterCommand) beside its modules.
func Command() caddycmd.Command {
	return caddycmd.Command{
		Name:  "replay",
		Usage: "--review <url> --upstream <base_url> --model <version> [--concurrency <n>] [--price <yuan>] [--out <file>] [--escalate <first version>] [--limit <n>] [--dry-run]",
		Short: "Re-asks the labelled requests to a new model version, for calibrate",
		Long: `
Calibrates a new model version before it serves, from the labels already
given: a label is about the content, not the model that answered.

For each entry with labels in the review API's /labels (--review is the base
URL of a systemone_review mount; user info in it is sent as basic auth)
whose stored request is available (queued with the route block's
include_content), replay sends that request, its "model" set to --model, to
<base_url>/v1/systemone once, with X-Systemone-Replay: 1 (a gateway routes
it as any other request but neither queues nor audits it), retrying 429,
529 and 5xx up to twice and honouring retry-after. The API key is read from
the environment variable SYSTEMONE_API_KEY, never from a flag.

For each labelled question of the entry it writes one /labels line to --out
or standard output: model, confidence and answer from the new response,
agree recomputed against the same label, route "replay", request_id the new
response's x-request-id, every other field as in the original line. So:

  systemone-gateway replay ... | systemone-gateway calibrate --target 0.95 -

An entry that fails (no 200 after the retries, a refusal, a redirect) is
not dropped from the sample: each of its labelled questions is written as
a disagreement at confidence 1 with no answer and route "replay_failed",
under the version the other entries were answered by. calibrate counts it
against every threshold, so failures can only raise thresholds, never make
a wrong one more likely; replay again when the upstream is healthy.

No redirect is followed: a 3xx from the review API or the upstream is a
failure, so that the review API's password and the API key go only to the
URLs given. /labels is streamed, an entry at a time: memory does not grow
with its length.

The last line on standard error is the summary
"replayed <n> skipped <n> failed <n> tokens <n> cost <yuan>" (skipped: no
stored request; cost at --price yuan per million input tokens). On a
terminal, a progress line above it counts the entries as they go. The
exit status is 1 when any entry failed, 2 for a wrong command line.

--escalate <first version> writes the lines an "escalate <first version>
to <--model> { ... }" block is calibrated from: of each entry answered by
the first version, only the labelled questions its answer routed human for
low confidence (as the stored entry records it) are asked of --model, in
one request per entry holding those questions only, as the gateway's
escalation asks them. Each is written as an escalated question's second
answer: "stage" 2, "escalated_from" the first version, model, confidence,
answer and agree the new answer's, route "replay" (or, failed, the
disagreement above, stage 2 too). Entries with no such question are not
asked and not counted.

--limit <n> replays at most the first n labelled entries of /labels (with
--escalate, of those holding a question to ask again).
--dry-run sends nothing: it writes one line per entry that would be
replayed, "entry <id> questions <n> tokens <estimate>" (the gateway's own
estimate of the stored request's input tokens), and ends with the
estimated tokens and cost at --price.

Defaults: --concurrency 4, --price 0.042, --limit 0 (all).
`,
		CobraFunc: setUp,
	}
}

func setUp(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.String("review", "", "base URL of the systemone_review mount (required)")
	fl.String("upstream", "", "base URL of the evaluation API, a gateway or the service (required)")
	fl.String("model", "", "the version to ask, e.g. service-preview or service-2.0.0 (required)")
	fl.Int("concurrency", DefaultConcurrency, "entries replayed at once")
	fl.Float64("price", DefaultPrice, "yuan per million input tokens, for the summary's cost")
	fl.String("out", "", "write the lines to this file instead of standard output")
	fl.Int("limit", 0, "replay at most the first n labelled entries of /labels (0: all)")
	fl.Bool("dry-run", false, "send nothing: list the entries that would be replayed, with estimated tokens and cost")
	fl.String("escalate", "", "the first version of an escalate block: ask --model only the questions it routed human for low confidence, written as stage 2 lines")
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return run(cmd, os.Getenv(APIKeyEnv), sleep)
	}
	cli.SetUp(cmd, `docs/calibration.md, "replay: a new version calibrated before it serves"`)
}

// run runs the command with the API key apiKey, waiting before a retry
// with wait.
func run(cmd *cobra.Command, apiKey string, wait func(context.Context, time.Duration) error) error {
	fl := cmd.Flags()
	opts := Options{APIKey: apiKey, Log: cmd.ErrOrStderr(), Sleep: wait}
	opts.Review, _ = fl.GetString("review")
	opts.Upstream, _ = fl.GetString("upstream")
	opts.Model, _ = fl.GetString("model")
	opts.Concurrency, _ = fl.GetInt("concurrency")
	opts.Price, _ = fl.GetFloat64("price")
	opts.Limit, _ = fl.GetInt("limit")
	opts.DryRun, _ = fl.GetBool("dry-run")
	opts.Escalate, _ = fl.GetString("escalate")
	outPath, _ := fl.GetString("out")
	if opts.Concurrency < 1 {
		return cli.Usagef("--concurrency %d is less than 1", opts.Concurrency)
	}
	if opts.Price <= 0 {
		return cli.Usagef("--price %v is not above 0", opts.Price)
	}
	if err := opts.setDefaults(); err != nil {
		return cli.Usage(err)
	}

	out := cmd.OutOrStdout()
	var file *os.File
	if outPath != "" {
		var err error
		if file, err = os.Create(outPath); err != nil {
			return err
		}
		defer file.Close()
		out = file
	}
	errw := cmd.ErrOrStderr()
	progress := newProgress(errw)
	opts.Progress = progress.show
	opts.Log = progress.lineWriter()
	bw := bufio.NewWriter(out)
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	sum, err := Run(ctx, opts, bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && file != nil {
		err = file.Close()
	}
	progress.clear()
	if err != nil && sum == (Summary{}) {
		return err // nothing was replayed: /labels unreadable, or a bad flag
	}
	if err != nil {
		cli.Fail(cmd, err) // printed before the summary, which stays the last line
	}
	if opts.DryRun {
		fmt.Fprintf(errw, "dry run: nothing sent; would replay %d skipped %d failed %d tokens %d (estimated) cost %s (estimated)\n",
			sum.Replayed, sum.Skipped, sum.Failed, sum.Tokens, formatYuan(sum.Cost))
	} else {
		fmt.Fprintln(errw, sum) // the last line on standard error
	}
	if err != nil || sum.Failed > 0 {
		return cli.Exit(cmd, cli.StatusFailure) // said above: the summary stays the last line
	}
	return nil
}
