package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

const (
	// homeHolds is how many decidable holds Home lists.
	homeHolds = 10
	// homeHoldScan bounds the open holds Home reads looking for those the
	// viewer may decide (oldest first).
	homeHoldScan = 500
	// homeFailures is how many recent failures Home lists.
	homeFailures = 6
)

// chartStatuses are the chart's stacks, bottom up.
var chartStatuses = []string{store.RunSucceeded, store.RunRunning, store.RunSuspended, store.RunCancelled, store.RunFailed, store.RunRecoveryExhausted}

func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	v, err := c.homeView(r.Context(), identity(r).Caller())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, "Home", "home")
	c.render(w, r, http.StatusOK, templates.HomePage(v))
}

// homeView builds Home (SPEC §6 "What a steward sees first"); the benchmark
// times it with the render.
func (c *Console) homeView(ctx context.Context, d engine.Decider) (templates.HomeView, error) {
	var v templates.HomeView
	now := c.Now()
	usage, err := c.Store.UsageList(ctx, &store.UsageListParams{Since: now.Add(-24 * time.Hour), GroupBy: store.UsageByModel, Limit: 100})
	if err != nil {
		return v, err
	}
	v.Usage = usagePhrase(sumUsage(usage, nil), "")
	open, err := c.Store.HoldCountOpen(ctx)
	if err != nil {
		return v, err
	}
	v.OpenHolds = int(open)

	if err := c.homeDecidable(ctx, d, &v); err != nil {
		return v, err
	}

	since := now.Add(-23 * time.Hour).Truncate(time.Hour)
	hours, err := c.Store.RunHourCounts(ctx, since)
	if err != nil {
		return v, err
	}
	byStatus := map[string]int64{}
	for _, h := range hours {
		byStatus[h.Status] += h.N
		v.RunsTotal += h.N
	}
	for _, st := range runStatuses {
		q := url.Values{"status": {st}}
		v.RunCounts = append(v.RunCounts, templates.StatusCount{Status: st, Label: statusLabel(st) + " (24 h)", N: byStatus[st],
			URL: templSafe("/runs?" + q.Encode())})
	}
	v.Chart = runsChart(hours, since)

	var fails []*store.Run
	for _, st := range []string{store.RunFailed, store.RunRecoveryExhausted} {
		rs, err := c.Store.RunList(ctx, &store.RunListParams{Status: st, Limit: homeFailures})
		if err != nil {
			return v, err
		}
		fails = append(fails, rs...)
	}
	sort.Slice(fails, func(i, j int) bool { return fails[i].CreatedAt.After(fails[j].CreatedAt) })
	names := c.userNames(ctx)
	for i, run := range fails {
		if i == homeFailures {
			break
		}
		row := c.runRow(run)
		if row.ErrorKind == "" {
			row.ErrorKind = run.Status
		}
		row.Error = firstSentence(peopleIn(run.Error, names), 140)
		v.Failures = append(v.Failures, row)
	}
	return v, nil
}

// homeDecidable lists the open holds d may approve, oldest first, by the
// engine's rule (engine.Rights): a hold d asked for, or already approved,
// is not theirs to decide.
func (c *Console) homeDecidable(ctx context.Context, d engine.Decider, v *templates.HomeView) error {
	if c.Engine == nil {
		v.ViewerNote = "The workflow engine is not running, so no hold can be decided now."
		return nil
	}
	rights, err := c.Engine.RightsOf(ctx, d)
	if err != nil {
		return err
	}
	if !rights.Steward() {
		v.ViewerNote = "You are signed in as a " + d.Role + ": stewards and admins decide holds. The Holds page shows what is waiting."
		v.MoreHolds = v.OpenHolds
		return nil
	}
	v.CanDecide = true
	var (
		picked []*store.Hold
		after  *store.ListCursor
		seen   int
	)
	for seen < homeHoldScan && len(picked) < homeHolds {
		page, err := c.Store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, After: after, Limit: 100})
		if err != nil {
			return err
		}
		for _, h := range page {
			seen++
			if ok, _ := rights.MayApprove(h); ok && len(picked) < homeHolds {
				picked = append(picked, h)
			}
		}
		if len(page) < 100 {
			break
		}
		last := page[len(page)-1]
		after = &store.ListCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	payloads, err := c.holdPayloads(ctx, picked)
	if err != nil {
		return err
	}
	names := c.userNames(ctx)
	for _, h := range picked {
		row := c.holdRow(h, payloads[h.ItemID], nil, names)
		v.Decidable = append(v.Decidable, row)
	}
	v.MoreHolds = v.OpenHolds - len(v.Decidable)
	return nil
}

// runsChart lays out runs per hour by status over the 24 hours from since
// as stacked bars in SVG units.
func runsChart(hours []store.RunHourCount, since time.Time) templates.Chart {
	const (
		width, height = 720, 210
		left, bottom  = 40, 22
		top           = 8
		slots         = 24
	)
	ch := templates.Chart{Width: width, Height: height, Statuses: chartStatuses}
	idx := map[string]int{}
	for i, st := range chartStatuses {
		idx[st] = i
	}
	counts := make([][]int64, slots)
	for i := range counts {
		counts[i] = make([]int64, len(chartStatuses))
	}
	var maxTotal, total int64
	totals := make([]int64, slots)
	legend := make([]int64, len(chartStatuses))
	for _, h := range hours {
		slot := int(h.Hour.Sub(since.UTC().Truncate(time.Hour)) / time.Hour)
		si, ok := idx[h.Status]
		if slot < 0 || slot >= slots || !ok {
			continue
		}
		counts[slot][si] += h.N
		totals[slot] += h.N
		legend[si] += h.N
		total += h.N
	}
	for _, t := range totals {
		maxTotal = max(maxTotal, t)
	}
	scaleMax := niceCeil(maxTotal)
	plotH := height - bottom - top
	slotW := (width - left) / slots
	for i := 0; i <= 4; i++ {
		val := scaleMax * int64(i) / 4
		y := top + plotH - int(int64(plotH)*val/scaleMax)
		ch.YTicks = append(ch.YTicks, templates.ChartTick{Y: y, Label: strconv.FormatInt(val, 10)})
	}
	start := since.UTC().Truncate(time.Hour)
	for s := range slots {
		hour := start.Add(time.Duration(s) * time.Hour)
		x := left + s*slotW + 2
		y := top + plotH
		row := templates.ChartRow{Hour: hour.Format("Jan 2 15:04"), Total: totals[s]}
		for si, st := range chartStatuses {
			n := counts[s][si]
			row.Counts = append(row.Counts, n)
			if n == 0 {
				continue
			}
			h := int(int64(plotH) * n / scaleMax)
			if h < 1 {
				h = 1
			}
			y -= h
			ch.Bars = append(ch.Bars, templates.ChartBar{X: x, Y: y, W: slotW - 4, H: h, Status: st,
				Title: fmt.Sprintf("%s UTC: %d %s", hour.Format("15:04"), n, statusLabel(st))})
		}
		ch.Table = append(ch.Table, row)
		switch {
		case s == 0:
			ch.Ticks = append(ch.Ticks, templates.ChartTick{X: x, Y: height - 6, Label: hour.Format("15:04"), Anchor: "start"})
		case s == slots-1:
			ch.Ticks = append(ch.Ticks, templates.ChartTick{X: width, Y: height - 6, Label: hour.Format("15:04"), Anchor: "end"})
		case s%6 == 0:
			ch.Ticks = append(ch.Ticks, templates.ChartTick{X: x + (slotW-4)/2, Y: height - 6, Label: hour.Format("15:04"), Anchor: "middle"})
		}
	}
	for si, st := range chartStatuses {
		ch.Legend = append(ch.Legend, templates.StatusCount{Status: st, Label: statusLabel(st), N: legend[si]})
	}
	busiest := ""
	if maxTotal > 0 {
		for s, t := range totals {
			if t == maxTotal {
				busiest = fmt.Sprintf("; the busiest hour was %s UTC with %d", start.Add(time.Duration(s)*time.Hour).Format("15:04"), t)
				break
			}
		}
	}
	ch.Summary = fmt.Sprintf("Runs per hour by status over the last 24 hours: %d runs in all%s.", total, busiest)
	return ch
}

// niceCeil rounds n up to 1, 2, 4, 5 or 8 times a power of ten (at least 4, so
// the four grid steps are whole numbers).
func niceCeil(n int64) int64 {
	if n <= 4 {
		return 4
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 4, 5, 8} {
			if v := m * p; v >= n && v%4 == 0 {
				return v
			}
		}
		if p > 1e15 {
			return n
		}
	}
}

func statusLabel(s string) string { return strings.ReplaceAll(s, "_", " ") }

// firstSentence cuts an error to its first line, at most n runes.
func firstSentence(s string, n int) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(line); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return line
}
