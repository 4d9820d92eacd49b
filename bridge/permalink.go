package bridge

import (
	"context"
	"fmt"

	"github.com/slack-go/slack"
)

// Permalinks answers Slack message permalinks (chat.getPermalink) for the
// console's session and hold pages (it is the console's web.Permalinker).
type Permalinks struct {
	API *slack.Client
}

// Permalink answers the permalink of the message ts in channel.
func (p Permalinks) Permalink(ctx context.Context, channel, ts string) (string, error) {
	link, err := p.API.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: channel, Ts: ts})
	if err != nil {
		return "", fmt.Errorf("chat.getPermalink %s %s: %w", channel, ts, err)
	}
	return link, nil
}
