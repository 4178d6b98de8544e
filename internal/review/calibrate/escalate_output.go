package calibrate

import (
	"bufio"
	"fmt"
	"strings"
)

// escalateBlock is the fragment's block for the second answers of one
// (first version, second version).
type escalateBlock struct {
	from, to string
	lines    []string
	// thresholds counts the lines that are thresholds (not comments);
	// labels the groups' labels, to choose among second versions.
	thresholds, labels int
}

// writeEscalations writes, after the pins, an `escalate <first> to
// <second> { ... }` block per first version whose second answers have a
// threshold: a line per type or question group with one (a type without
// one is left out: its escalated questions stay with a person, never at a
// fallback threshold). No block when no group has a threshold. The
// gateway takes one block per first version: of several second versions,
// the one with the most labels is written, the others named in a comment.
// groups are all of the result's groups, sorted.
func writeEscalations(bw *bufio.Writer, groups []Group) {
	var blocks []escalateBlock
	for _, g := range groups {
		if g.EscalatedFrom == "" {
			continue
		}
		if n := len(blocks); n == 0 || blocks[n-1].from != g.EscalatedFrom || blocks[n-1].to != g.Model {
			blocks = append(blocks, escalateBlock{from: g.EscalatedFrom, to: g.Model})
		}
		b := &blocks[len(blocks)-1]
		b.labels += g.Labels
		if line, ok := thresholdLine(g, groups); ok {
			b.lines = append(b.lines, line)
			if !strings.HasPrefix(line, "#") {
				b.thresholds++
			}
		}
	}
	for i := 0; i < len(blocks); {
		from := blocks[i].from
		best := -1
		var others []string
		for ; i < len(blocks) && blocks[i].from == from; i++ {
			if blocks[i].thresholds == 0 {
				continue
			}
			if best < 0 || blocks[i].labels > blocks[best].labels {
				if best >= 0 {
					others = append(others, blocks[best].to)
				}
				best = i
			} else {
				others = append(others, blocks[i].to)
			}
		}
		if best < 0 {
			continue // no second version has a threshold: no block
		}
		b := blocks[best]
		for _, to := range others {
			fmt.Fprintf(bw, "\t# escalate %s to %s has thresholds too: the gateway takes one escalate block per version, so only %s's (more labels) is written\n",
				quoteNote(from), quoteNote(to), quoteNote(b.to))
		}
		fromToken, ok1 := caddyfileToken(b.from)
		toToken, ok2 := caddyfileToken(b.to)
		if !ok1 || !ok2 {
			fmt.Fprintf(bw, "\t# escalate %s to %s: no Caddyfile token can hold the version; set it in the JSON config\n", quoteNote(b.from), quoteNote(b.to))
			continue
		}
		fmt.Fprintf(bw, "\tescalate %s to %s {\n", fromToken, toToken)
		for _, line := range b.lines {
			fmt.Fprintf(bw, "\t\t%s\n", line)
		}
		fmt.Fprintln(bw, "\t}")
	}
}
