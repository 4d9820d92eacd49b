package model

import (
	"context"
	"errors"
	"strings"
)

// Template is the offline provider. The engine renders the prompt itself, so
// echoing the last user message makes runs deterministic and reproducible
// without network access or keys, which is what tests and demos need.
type Template struct{}

// Name implements Model.
func (Template) Name() string { return "template" }

// Complete returns the last user message verbatim. Token counts are word
// counts so usage accounting has plausible, stable numbers to record.
func (Template) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	out, found := "", false
	in := 0
	for _, m := range req.Messages {
		in += wordCount(m.Content)
		if m.Role == RoleUser {
			out, found = m.Content, true
		}
	}
	if !found {
		// Nothing to render means the caller built the request wrong; an
		// empty output would otherwise flow silently into a held memo.
		return Response{}, errors.New("template: request has no user message")
	}
	return Response{Content: out, TokensIn: in, TokensOut: wordCount(out)}, nil
}

func wordCount(s string) int { return len(strings.Fields(s)) }
