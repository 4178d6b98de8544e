package calibrate

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// FormatThreshold writes a threshold with at most 4 decimals, rounded up,
// as the fragment's lines write it (certificate.FormatThreshold).
func FormatThreshold(t float64) string { return certificate.FormatThreshold(t) }

// resultJSON is the documented `--json` document.
type resultJSON struct {
	Target float64 `json:"target"`
	Delta  float64 `json:"delta"`
	// Method is the method the thresholds were computed with; Since the
	// first entry id counted (--since), null without.
	Method string  `json:"method"`
	Since  *string `json:"since"`
	// Family is present, true, with --family: delta is family-wise.
	Family  bool        `json:"family,omitempty"`
	Ignored int         `json:"ignored"`
	Groups  []groupJSON `json:"groups"`
}

type groupJSON struct {
	Model          string   `json:"model"`
	Type           string   `json:"type"`
	Question       string   `json:"question"`
	Org            string   `json:"org"`
	Labels         int      `json:"labels"`
	Threshold      *float64 `json:"threshold"`
	Agree          int      `json:"agree"`
	N              int      `json:"n"`
	Entries        int      `json:"entries"`
	LowerBound     *float64 `json:"lower_bound"`
	Coverage       float64  `json:"coverage"`
	LabelsNeeded   int      `json:"labels_needed"`
	LabelsExpected *int     `json:"labels_expected"`
	// CompleteThrough and WaitingOn are null when "": how far the
	// complete prefix reaches, and the entry holding it back.
	CompleteThrough *string `json:"complete_through"`
	WaitingOn       *string `json:"waiting_on"`
	Waiting         int     `json:"waiting"`
	Refused         int     `json:"refused"`
	// LateCorrections is the review API's count (GET /progress); null
	// from a file, which cannot tell.
	LateCorrections *int `json:"late_corrections"`
	// Delta is the group's share of the family's delta, with --family
	// only.
	Delta *float64 `json:"delta,omitempty"`
	// Bins is the reliability diagram, InForce the threshold in force
	// (null when no answer of the group was routed auto): bins.go.
	Bins    []binJSON    `json:"bins"`
	InForce *inForceJSON `json:"in_force"`
}

type binJSON struct {
	From      float64 `json:"from"`
	To        float64 `json:"to"`
	N         int     `json:"n"`
	Agree     int     `json:"agree"`
	Agreement float64 `json:"agreement"`
	Lower     float64 `json:"lower"`
	Upper     float64 `json:"upper"`
}

type inForceJSON struct {
	Threshold float64 `json:"threshold"`
	N         int     `json:"n"`
	Agree     int     `json:"agree"`
}

// MarshalJSON writes the documented `--json` document: {"target", "delta",
// "method", "since", "ignored", "groups": [{"model", "type", "question",
// "org", "labels", "threshold", "agree", "n", "entries", "lower_bound",
// "coverage", "labels_needed", "labels_expected", "complete_through",
// "waiting_on", "waiting", "refused", "late_corrections", "bins",
// "in_force"}]}, since null without --since, with an unrounded
// threshold, or null; lower_bound null where the method has none,
// labels_expected null where there is no estimate, complete_through null
// with an empty prefix, waiting_on null when nothing holds it back,
// late_corrections null unless the review API counted them. Notes are not
// part of it.
func (r Result) MarshalJSON() ([]byte, error) {
	doc := resultJSON{Target: r.Target, Delta: r.Delta, Method: r.Method, Family: r.Family, Ignored: r.Ignored, Groups: make([]groupJSON, 0, len(r.Groups))}
	if r.Since.Set {
		since := r.Since.String()
		doc.Since = &since
	}
	for _, g := range r.Groups {
		gj := groupJSON{
			Model: g.Model, Type: g.Type, Question: g.Question, Org: g.Org, Labels: g.Labels,
			Agree: g.Agree, N: g.N, Entries: g.Entries, Coverage: g.Coverage,
			LabelsNeeded: g.LabelsNeeded,
		}
		if g.HasThreshold {
			gj.Threshold = &g.Threshold
		}
		if g.HasLowerBound {
			gj.LowerBound = &g.LowerBound
		}
		if g.HasLabelsExpected {
			gj.LabelsExpected = &g.LabelsExpected
		}
		if g.CompleteThrough != "" {
			gj.CompleteThrough = &g.CompleteThrough
		}
		if g.WaitingOn != "" {
			gj.WaitingOn = &g.WaitingOn
		}
		gj.Waiting, gj.Refused = g.Waiting, g.Refused
		if g.HasLateCorrections {
			gj.LateCorrections = &g.LateCorrections
		}
		gj.Bins = make([]binJSON, len(g.Bins))
		for i, b := range g.Bins {
			gj.Bins[i] = binJSON(b)
		}
		if g.InForce != nil {
			gj.InForce = (*inForceJSON)(g.InForce)
		}
		if r.Family {
			gj.Delta = &g.Delta
		}
		doc.Groups = append(doc.Groups, gj)
	}
	return json.Marshal(doc)
}

// WriteJSON writes r as the documented `--json` document, indented, with a
// final newline.
func WriteJSON(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a summary line and a table: model, type, question ("-"
// for a type group), labels used, threshold (as the fragment writes it) or
// "none", agreement k/n, lower bound, coverage, NEED (labels_needed) and
// EXPECT (labels_expected, "-" when there is none). Without a threshold,
// k/n and the bound are those of the first candidate tested, "-" when none
// was. Under the table, one line per group without a threshold says why it
// has none.
func WriteTable(w io.Writer, r Result) error {
	bw := bufio.NewWriter(w)
	used := 0
	for _, g := range r.Groups {
		used += g.Labels
	}
	method := r.Method
	if method == "" {
		method = MethodAnytime
	}
	since := ""
	if r.Since.Set {
		since = ", entries from " + r.Since.String() + " on"
	}
	fmt.Fprintf(bw, "target %v, delta %v%s, method %s%s: %d audited labels used, %d not audited (ignored)",
		r.Target, r.Delta, familyNote(r), method, since, used, r.Ignored)
	if r.Duplicates > 0 {
		fmt.Fprintf(bw, ", %d duplicate lines counted once", r.Duplicates)
	}
	fmt.Fprint(bw, "\n\n")
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tTYPE\tQUESTION\tLABELS\tTHRESHOLD\tAGREE\tLB\tCOVERAGE\tNEED\tEXPECT")
	var why []string
	for _, g := range r.Groups {
		threshold, agree, lb, coverage, expect := "none", "-", "-", "-", "-"
		if g.HasThreshold {
			threshold = FormatThreshold(g.Threshold)
			coverage = fmt.Sprintf("%.1f%%", 100*g.Coverage)
		} else {
			why = append(why, whyLine(g, r.Target, cmp.Or(g.Delta, r.Delta), method))
		}
		if g.N > 0 {
			agree = fmt.Sprintf("%d/%d", g.Agree, g.N)
			if g.HasLowerBound {
				lb = fmt.Sprintf("%.4f", g.LowerBound)
			}
		}
		if g.HasLabelsExpected {
			expect = strconv.Itoa(g.LabelsExpected)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n",
			display(g.Model), g.Type, groupQuestion(g), g.Labels, threshold, agree, lb, coverage, g.LabelsNeeded, expect)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var held []string
	for _, g := range r.Groups {
		if line := prefixLine(g); line != "" {
			held = append(held, line)
		}
	}
	if len(held) > 0 {
		fmt.Fprintln(bw)
		for _, line := range held {
			fmt.Fprintln(bw, line)
		}
	}
	if len(why) > 0 {
		fmt.Fprintln(bw)
		for _, line := range why {
			fmt.Fprintln(bw, line)
		}
		unit := "entries"
		if method == MethodUniform {
			unit = "labels"
		}
		fmt.Fprintf(bw, "NEED: more audited %s that would give a threshold if each agreed at the group's highest confidence (a floor).\n", unit)
		fmt.Fprintf(bw, "EXPECT: the median more audited entries a threshold would take if answers went on agreeing as they have so far.\n")
	}
	return bw.Flush()
}

// prefixLine says, for a group whose evidence is held back or refused,
// how far its complete prefix reaches and what holds it; "" otherwise.
func prefixLine(g Group) string {
	if g.WaitingOn == "" && g.Refused == 0 {
		return ""
	}
	line := groupLabel(g) + ": evidence "
	if g.CompleteThrough == "" {
		line += "not started"
	} else {
		line += "complete through entry " + g.CompleteThrough
	}
	if g.WaitingOn != "" {
		line += fmt.Sprintf(", waiting on entry %s (not all labelled, or labelled within the correction window); %d labels after it wait", g.WaitingOn, g.Waiting)
	}
	if g.Refused > 0 {
		line += fmt.Sprintf("; %d entries with more questions than --max-questions refused", g.Refused)
	}
	return line
}

// groupLabel names a group in a line under the table.
func groupLabel(g Group) string {
	name := display(g.Model) + " " + g.Type
	if g.Question != "" {
		name += " question " + display(g.Question)
	}
	if g.Org != "" {
		name += " org " + display(g.Org)
	}
	return name
}

func groupQuestion(g Group) string {
	if g.Org != "" {
		return "org " + display(g.Org)
	}
	if g.Question == "" {
		return "-"
	}
	return display(g.Question)
}

// whyLine says, for a group without a threshold, why the walk found none,
// with the agreement seen so far.
func whyLine(g Group, target, delta float64, method string) string {
	name := groupLabel(g)
	if method != MethodUniform {
		if g.Why == WhyBelowTarget {
			return fmt.Sprintf("%s: no threshold yet: the first candidate (confidence %s, %d entries, %d questions) has evidence %.3g where it needs %.3g (target %v, delta %v); agreement there %d/%d",
				name, strconv.FormatFloat(g.Start, 'f', -1, 64), g.Entries, g.N, g.Evidence, 1/g.Level, target, delta, g.Agree, g.N)
		}
		return fmt.Sprintf("%s: no threshold yet: too few entries; the first %d with a confidence set where the walk starts, and with every entry agreeing %d in all give a threshold (target %v, delta %v); agreement so far %d/%d",
			name, BurnIn(target, delta), g.Needs, target, delta, g.ScoredAgree, g.Scored)
	}
	if g.Why == WhyBelowTarget {
		return fmt.Sprintf("%s: no threshold: the first candidate tested (confidence %s, %d lines) has a lower bound of %.4f, below the target %v; agreement there %d/%d",
			name, strconv.FormatFloat(g.Start, 'f', -1, 64), g.N, g.LowerBound, target, g.Agree, g.N)
	}
	if g.Scored == 0 {
		what := "no labels yet"
		if g.Labels > 0 {
			what = "no labelled line has a confidence"
		}
		return fmt.Sprintf("%s: no threshold: %s; the top candidate needs %d lines (target %v, delta %v)",
			name, what, MinLines(target, delta), target, delta)
	}
	return fmt.Sprintf("%s: no threshold: too few lines, %d with a confidence, where the top candidate needs %d (target %v, delta %v); agreement so far %d/%d",
		name, g.Scored, MinLines(target, delta), target, delta, g.ScoredAgree, g.Scored)
}

// display shows an id in the table: as is when it is plain, else quoted, so
// that spaces, tabs and control characters cannot break the columns.
func display(s string) string {
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	if s == "" || s == "-" {
		return strconv.Quote(s)
	}
	return s
}

// WriteFragment writes the thresholds as a Caddyfile `route` block, one pin
// per model version, for the `systemone` directive: `noul`, `choice` and
// `score` lines for the type groups with a threshold (a type without one is
// left out, so it routes human with no_threshold), then `question <id> <t>`
// for the question groups with one (a question group without one gets a
// comment: the gateway gives it its type's threshold, and no route setting
// can send one question id to a human). A version with no threshold at all
// still gets its (empty) pin, so that it routes human even with `unpinned
// auto`. Versions and ids are written so that the gateway reads back
// exactly them (see caddyfileToken); one that no Caddyfile token can hold
// is written as a comment instead (set it in the JSON config). Nothing is
// written when r has no groups.
func WriteFragment(w io.Writer, r Result) error {
	if len(r.Groups) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "route {")
	for _, line := range promiseComment(r) {
		fmt.Fprintf(bw, "\t# %s\n", line)
	}
	for i := 0; i < len(r.Groups); {
		model := r.Groups[i].Model
		var body []string
		orgs := map[string][]string{} // org -> its lines, in type order
		var orgOrder []string
		for ; i < len(r.Groups) && r.Groups[i].Model == model; i++ {
			g := r.Groups[i]
			if g.Org != "" {
				// An org of its own never falls back to the pooled line:
				// without a threshold, its type routes human.
				line := g.Type + " human"
				if g.HasThreshold {
					line = g.Type + " " + FormatThreshold(g.Threshold)
					if g.Cert != "" {
						line += " cert " + g.Cert
					}
				}
				if _, ok := orgs[g.Org]; !ok {
					orgOrder = append(orgOrder, g.Org)
				}
				orgs[g.Org] = append(orgs[g.Org], line)
				continue
			}
			if !g.HasThreshold {
				if tg, ok := typeGroup(r.Groups, g); ok && g.Question != "" && tg.HasThreshold {
					body = append(body, fmt.Sprintf("# question %s: no threshold of its own; it takes %s %s, computed without its labels",
						quoteNote(g.Question), g.Type, FormatThreshold(tg.Threshold)))
				}
				continue
			}
			t := FormatThreshold(g.Threshold)
			if g.Cert != "" {
				t += " cert " + g.Cert
			}
			if g.Question == "" {
				body = append(body, g.Type+" "+t)
				continue
			}
			if id, ok := caddyfileToken(g.Question); ok {
				body = append(body, "question "+id+" "+t)
			} else {
				body = append(body, fmt.Sprintf("# question %s %s: no Caddyfile token can hold this id; set it in the JSON config", quoteNote(g.Question), t))
			}
		}
		slices.Sort(orgOrder)
		for _, org := range orgOrder {
			name, ok := caddyfileToken(org)
			if !ok {
				body = append(body, fmt.Sprintf("# org %s: no Caddyfile token can hold this name; set it in the JSON config", quoteNote(org)))
				continue
			}
			body = append(body, "org "+name+" {")
			for _, line := range orgs[org] {
				body = append(body, "\t"+line)
			}
			body = append(body, "}")
		}
		version, ok := caddyfileToken(model)
		if !ok {
			fmt.Fprintf(bw, "\t# version %s: no Caddyfile token can hold it; pin it in the JSON config\n", quoteNote(model))
			continue
		}
		fmt.Fprintf(bw, "\tpin %s {\n", version)
		if len(body) == 0 {
			fmt.Fprintln(bw, "\t\t# no threshold found: every question routes human (no_threshold)")
		}
		for _, line := range body {
			fmt.Fprintf(bw, "\t\t%s\n", line)
		}
		fmt.Fprintln(bw, "\t}")
	}
	fmt.Fprintln(bw, "}")
	return bw.Flush()
}

// caddyfileToken writes s as one Caddyfile token that the route block reads
// back as exactly s, or reports false for one no token can hold. A value
// passes three readers on its way from the fragment to the gateway, each
// checked against Caddy's own code (TestFragmentRoundTrip adapts random
// ids through all three):
//
//  1. The Caddyfile's "{$NAME}" environment substitution, over the raw text
//     before any token is read, inside quotes and heredocs too. It is
//     defeated by never writing "{$": an empty placeholder "{}" goes
//     between the two (step 3 replaces it with nothing).
//  2. The lexer (caddyconfig/caddyfile/lexer.go): bare when every character
//     means nothing to it; else in double quotes, where only \" is an
//     escape (a backslash before anything else is kept, so a value holding
//     \" or ending in a backslash cannot be quoted so); else in backticks,
//     where nothing is an escape and only a backtick cannot appear; else in
//     a heredoc, which keeps everything but carriage returns and its
//     marker, chosen absent from the value.
//  3. The route config's placeholders (route.New resolves {env.NAME} and the
//     like in versions and question ids, with caddy.Replacer): every "{"
//     and "}" of the value is escaped as "\{" and "\}", which the Replacer
//     reads as the brace itself. This also keeps the httpcaddyfile
//     shorthands ({host}, {header.X}, ...) from matching.
//
// Refused: the empty value (the route block refuses it) and one that holds
// a backtick and a carriage return and cannot be double-quoted.
func caddyfileToken(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	e := escapeBraces(s)
	switch {
	case bare(e):
		return e, true
	case !strings.Contains(e, `\"`) && !strings.HasSuffix(e, `\`):
		return `"` + strings.ReplaceAll(e, `"`, `\"`) + `"`, true
	case !strings.Contains(e, "`"):
		return "`" + e + "`", true
	case !strings.Contains(e, "\r"):
		return heredoc(e), true
	}
	return "", false
}

// escapeBraces escapes s for caddy.Replacer (a backslash before each brace)
// and breaks every "{$" with an empty placeholder, so that the Caddyfile's
// environment substitution never sees one.
func escapeBraces(s string) string {
	if !strings.ContainsAny(s, "{}") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '{' || c == '}' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
		if c == '{' && i+1 < len(s) && s[i+1] == '$' {
			b.WriteString("{}")
		}
	}
	return b.String()
}

// heredoc writes s as a Caddyfile heredoc, its closing marker at the start
// of a line: the lexer strips from each line the white space before that
// marker, so there is none. The marker is the first of ID, ID1, ID2, ...
// that s does not hold (the lexer ends the heredoc at the marker's first
// appearance, on a line of its own or not).
func heredoc(s string) string {
	marker := "ID"
	for i := 1; strings.Contains(s, marker); i++ {
		marker = "ID" + strconv.Itoa(i)
	}
	return "<<" + marker + "\n" + s + "\n" + marker
}

// bare reports whether s reads back as itself unquoted: letters, digits and
// a few punctuation marks that mean nothing to the lexer, and no leading
// "<<" (a heredoc) — which those marks exclude anyway.
func bare(s string) bool {
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:/@+=%~,", r) {
			return false
		}
	}
	return true
}

// quoteNote quotes s for a note or a Caddyfile comment: on one line, and
// with "$" escaped so that no "{$...}" is substituted in the comment.
func quoteNote(s string) string {
	return strings.ReplaceAll(strconv.Quote(s), "$", `\u0024`)
}
