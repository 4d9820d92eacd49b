package web

import (
	"strings"

	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/holdfast-bot/holdfast/templates"
)

// maxDiffLines bounds a diff shown on a page.
const maxDiffLines = 2000

// lineDiff compares two texts line by line (diff-match-patch in line mode:
// each line is one symbol), answering the lines of both in order, each
// marked unchanged, removed or added.
func lineDiff(from, to string) []templates.DiffLine {
	from, to = strings.ReplaceAll(from, "\r\n", "\n"), strings.ReplaceAll(to, "\r\n", "\n")
	dmp := diffmatchpatch.New()
	a, b, lines := dmp.DiffLinesToChars(from, to)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(a, b, false), lines)
	var out []templates.DiffLine
	for _, d := range diffs {
		op := "="
		switch d.Type {
		case diffmatchpatch.DiffDelete:
			op = "-"
		case diffmatchpatch.DiffInsert:
			op = "+"
		}
		text := strings.TrimSuffix(d.Text, "\n")
		for _, line := range strings.Split(text, "\n") {
			if len(out) == maxDiffLines {
				return append(out, templates.DiffLine{Op: "=", Text: "… (the rest is not shown)"})
			}
			out = append(out, templates.DiffLine{Op: op, Text: line})
		}
	}
	return out
}
