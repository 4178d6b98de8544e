package calibrate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/cli"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// Commands returns the `calibrate` and `verify` subcommands, for the
// binary to register (caddycmd.RegisterCommand) beside its modules;
// check is what `verify --config` compares a Caddyfile with (nil: the
// option answers that it is not available).
func Commands(check ConfigCheck) []caddycmd.Command {
	return []caddycmd.Command{{
		Name:  "calibrate",
		Usage: "--target <agreement> [--delta <risk>] [--by type|question|org] [--min-labels <n>] [--method anytime|uniform|weighted] [--family] [--correct-within <duration>] [--max-questions <n>] [--since <time|entry id>] [--as-of <time>] [--certificates <file>] [--json] <labels>",
		Short: "Computes route thresholds from the review API's labels",
		Long: `
Computes, for each model version and question type (and, with --by
question, each question id with at least --min-labels audited labels), the
lowest confidence threshold at which answers agree with people's labels at
least --target of the time. The chance that a threshold it reports has
lower agreement is at most --delta. Only audited labels (a random sample
of routed answers) count; the others are reported as ignored. Lines with
the same model, request_id and question count once (the first by entry).

--method anytime (the default) holds however often you run it as labels
come in: each entry (its questions of a group together) is one
observation, taken in entry order, tested by betting e-processes on a
grid of thresholds fixed in advance (docs/calibration.md). --method
weighted is the same for the labels of the active audit (audit active),
each entry weighed by 1/audit_p. --method uniform counts each question
as an observation with Clopper-Pearson bounds: valid only for one run at
a number of labels fixed in advance, not for running again as labels
come in.

<labels> is a file of the review API's /labels lines, - for standard
input, or the http(s) URL of a /labels endpoint; user info in the URL
(https://user:password@host/review/labels) is sent as basic auth.

The output is a table, then a Caddyfile route block with a pin per model
version to paste into the systemone directive: thresholds are rounded up to
4 decimals, and a type or question without a threshold is left out, so it
routes human (no_threshold). Versions and question ids are written so that
the gateway reads back exactly them: braces escaped (\{ \}) so that no
placeholder is resolved, and quoted, backticked or in a heredoc as the
Caddyfile needs. Paste the block as printed. The table's NEED column
(labels_needed in --json) is a floor: how many more audited entries, each
agreeing at the group's highest confidence, would give a group a
threshold; EXPECT (labels_expected) the median number if answers went on
agreeing as they have so far. A line under the table says why each group
without a threshold has none. --json prints the groups as JSON instead,
with unrounded thresholds.

Evidence is taken only from each group's complete prefix: its audited
entries in entry order up to, not including, the first that is not
complete. An entry is complete when all its audited questions are
labelled (or it is passed) and its newest label is at least
--correct-within old at --as-of. An export holds a line with label and
agree null for each audited question not labelled yet, so the prefix is
computed from the file alone. The table says, per group held back, the
entry it waits on (--json: complete_through, waiting_on).

Each entry's evidence is weighed against --max-questions, the most
questions of one group an entry can hold, so that the guarantee is per
answer however the entries' sizes vary; an entry above it is refused and
counted.

--since <time|entry id> keeps only the entries from that point of the
review stream on, for example those queued after a guarantee alarm
(/guarantee's raised_at): an entry id, or an RFC 3339 time, compared
with when each entry was queued (the milliseconds of its id), not with
when it was labelled. A certificate records it, and verify recomputes
with it.

Each group's promise is its own: the chance that its threshold is wrong
is at most --delta on its own. --family holds it for all the groups of
the calibration together: the chance that any is wrong is at most
--delta, each group walked at its share of it (docs/calibration.md).

No audited label at all is an error (exit status 1); a --target or
--delta outside (0, 1) exits with status 2.

Defaults: --delta 0.05, --by type, --min-labels 30, --method anytime,
--correct-within 24h, --max-questions 5, --as-of now, every entry (no
--since).
`,
		CobraFunc: setUp,
	}, {
		Name:  "verify",
		Usage: "--certificates <file> [--config <Caddyfile>] [<labels>]",
		Short: "Checks calibrate's certificates against the review API's labels",
		Long: `
Recomputes each certificate of --certificates (written by calibrate
--certificates) from <labels>: the lines labelled at or before its
labels_until, under its own method, target, delta and grouping. Prints one
line per certificate, "ok <id>" or "mismatch <id>: <what differs>" (labels
changed, threshold, counts, evidence), and exits with status 1 when any
differs. <labels> is read as calibrate reads it: a file, - for standard
input, or the http(s) URL of a /labels endpoint. An organization can check
its own groups' certificates from its own lines.

--config <Caddyfile> compares the cert ids of the Caddyfile's systemone
route blocks with the certificates file: each must be a certificate of
its line's model, type, question or org and threshold (as calibrate writes
it, rounded up to 4 decimals). It prints "mismatch <Caddyfile>: <line>:
<what differs>" for each that is not, or one "ok <Caddyfile>" line, and
exits with status 1 on a mismatch, or when the Caddyfile has no cert id.
With --config, <labels> is optional.

A certificates file that is empty, not a regular file or over 16 MiB is an
error (exit status 1).
`,
		CobraFunc: func(cmd *cobra.Command) { setUpVerify(cmd, check) },
	}}
}

// setUp gives the cobra command its flags and its RunE. Output goes to the
// command's writers, so a test can run it whole.
func setUp(cmd *cobra.Command) {
	defaults := DefaultOptions()
	fl := cmd.Flags()
	fl.Float64("target", 0, "agreement to guarantee at or above a threshold, in (0, 1) (required)")
	fl.Float64("delta", defaults.Delta, "risk that the guarantee fails, in (0, 1)")
	fl.String("by", defaults.By, `group by "type", by "question" id where one has enough labels, or by "org" where one has enough entries`)
	fl.Int("min-labels", defaults.MinLabels, "audited labels a question id (--by question), or audited entries an org (--by org), needs for a group of its own")
	fl.String("certificates", "", "write a certificate per threshold to this file, and its id on the threshold's line")
	fl.String("method", defaults.Method, `"anytime" (valid however often you look), "weighted" for the labels of the active audit, or "uniform" (one look only)`)
	fl.Bool("json", false, "print the groups as JSON instead of a table and a Caddyfile fragment")
	fl.Bool("family", false, "hold the guarantee for all the groups together: the chance that any threshold is wrong is at most --delta")
	fl.Duration("correct-within", defaults.CorrectWithin, "the correction window: an entry is evidence once all its audited questions are labelled (or it is passed) and its newest label is this old; 0s takes labels as final at once")
	fl.String("as-of", "", "the time of the look, RFC 3339 (default now): recomputes a past look")
	fl.String("since", "", "keep only the entries from this point of the review stream on: an entry id, or an RFC 3339 time compared with when each entry was queued (its id), for example a guarantee alarm's raised_at")
	fl.Int("max-questions", defaults.MaxQuestions, "the most questions of one group an entry can hold, fixed in advance: each entry's evidence is weighed against it, an entry above it is refused and counted")
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return errors.New("want one <labels> argument: a file, - for standard input, or the URL of a /labels endpoint")
		}
		return nil
	}
	cmd.RunE = run
	cli.SetUp(cmd, `docs/calibration.md, "calibrate"`)
}

func run(cmd *cobra.Command, args []string) error {
	fl := cmd.Flags()
	if !fl.Changed("target") {
		return cli.Usagef("--target is required: the agreement to guarantee, for example --target 0.95")
	}
	opts := DefaultOptions()
	var err error
	opts.Target, _ = fl.GetFloat64("target") // pflag checked the types when it parsed
	opts.Delta, _ = fl.GetFloat64("delta")
	opts.By, _ = fl.GetString("by")
	opts.MinLabels, _ = fl.GetInt("min-labels")
	opts.Method, _ = fl.GetString("method")
	opts.CorrectWithin, _ = fl.GetDuration("correct-within")
	opts.MaxQuestions, _ = fl.GetInt("max-questions")
	opts.Family, _ = fl.GetBool("family")
	opts.AsOf = time.Now().UTC()
	if asOf, _ := fl.GetString("as-of"); fl.Changed("as-of") {
		if opts.AsOf, err = time.Parse(time.RFC3339Nano, asOf); err != nil {
			err = fmt.Errorf("--as-of %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", asOf)
			return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return 2, err })(cmd, args)
		}
	}
	if since, _ := fl.GetString("since"); fl.Changed("since") {
		if opts.Since, err = ParseSince(since); err != nil {
			return cli.Usage(err)
		}
	}
	if fl.Changed("max-questions") && opts.MaxQuestions < 1 {
		err = fmt.Errorf("--max-questions %d is less than 1", opts.MaxQuestions)
		return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return 2, err })(cmd, args)
	}
	asJSON, _ := fl.GetBool("json")
	certFile, _ := fl.GetString("certificates")
	if err = opts.Validate(); err != nil {
		// Before any fetching: a typo should not cost a download. A usage
		// error exits with status 2, as command-line tools do.
		return cli.Usage(err)
	}

	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background() // a command executed without one
	}
	var lines *Sample
	var raw [][]byte
	if certFile != "" {
		lines, raw, err = LoadRaw(ctx, args[0], cmd.InOrStdin())
	} else {
		lines, err = Load(ctx, args[0], cmd.InOrStdin())
	}
	if err != nil {
		return err
	}
	res, err := lines.Calibrate(opts)
	if err != nil {
		return err
	}
	if certFile != "" && len(res.Groups) > 0 {
		if err := writeCertificates(certFile, &res, opts, raw); err != nil {
			return err
		}
	}
	if len(res.Groups) == 0 {
		// Nothing a guarantee can stand on: an error, so that a script
		// never pastes an empty result.
		return fmt.Errorf("no audited labels in %s (%d lines, %d not audited): nothing to calibrate; set route { audit <fraction> } and label audited entries",
			sourceName(args[0]), lines.Lines(), res.Ignored)
	}
	if res.Duplicates > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %d lines repeat another's model, request_id and question (a cached answer, or a line exported twice): each counted once\n", res.Duplicates)
	}
	for _, note := range res.Notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note:", note)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return WriteJSON(out, res)
	}
	if err := WriteTable(out, res); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	return WriteFragment(out, res)
}

// sourceName names a labels source in a message: standard input, or the
// path or URL with any password masked.
func sourceName(src string) string {
	if src == "-" {
		return "standard input"
	}
	if u, err := url.Parse(src); err == nil && u.User != nil {
		return u.Redacted()
	}
	return src
}

// writeCertificates writes res's certificates to path, and their ids into
// res's groups for the fragment.
func writeCertificates(path string, res *Result, opts Options, raw [][]byte) error {
	certs, err := Certify(res, opts, raw, time.Now())
	if err != nil {
		return err
	}
	return certificate.WriteFile(path, certs)
}

func setUpVerify(cmd *cobra.Command, check ConfigCheck) {
	cmd.Flags().String("certificates", "", "the certificates file calibrate --certificates wrote (required)")
	cmd.Flags().String("config", "", "a Caddyfile whose route blocks' cert ids to compare with the certificates")
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		config, _ := cmd.Flags().GetString("config")
		if len(args) > 1 || len(args) == 0 && config == "" {
			return errors.New("want one <labels> argument (a file, - for standard input, or the URL of a /labels endpoint), or --config <Caddyfile>")
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return runVerify(cmd, args, check) }
	cli.SetUp(cmd, `docs/calibration.md, "Per organization (--by org), certificates and verify"`)
}

func runVerify(cmd *cobra.Command, args []string, check ConfigCheck) error {
	path, _ := cmd.Flags().GetString("certificates")
	if path == "" {
		return cli.Usagef("--certificates is required: the file calibrate --certificates wrote")
	}
	certs, err := certificate.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the certificates: %w", err)
	}
	mismatches := 0
	if config, _ := cmd.Flags().GetString("config"); config != "" {
		if mismatches, err = verifyConfig(cmd.OutOrStdout(), check, config, certs, path); err != nil {
			return err
		}
	}
	var found []Verification
	if len(args) == 1 {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		_, raw, err := LoadRaw(ctx, args[0], cmd.InOrStdin())
		if err != nil {
			return err
		}
		if found, err = Verify(certs, raw); err != nil {
			return err
		}
	}
	for _, v := range found {
		if !v.OK() {
			mismatches++
		}
		if _, err := fmt.Fprintln(cmd.OutOrStdout(), v); err != nil {
			return err
		}
	}
	if mismatches > 0 {
		return fmt.Errorf("%d mismatches between the certificates and the labels or the Caddyfile", mismatches)
	}
	return nil
}
