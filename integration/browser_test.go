//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is the headless browser the dashboard tests drive: Debian's
// chromium, which hack/test.sh installs where it is missing, or the one
// $KVLIVE_CHROMIUM names.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KVLIVE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium: hack/test.sh installs Debian's chromium package (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or set $KVLIVE_CHROMIUM)")
	return ""
}

// browser is one headless Chromium, its tabs the test's.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// browserWait bounds each step a tab takes.
const browserWait = 2 * time.Minute

// newBrowser starts headless Chromium with a profile of its own and no
// background networking (this machine's network is closed); it ends with
// the test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	// The first Do starts the browser and binds it to ctx, so it takes no
	// deadline of its own: the wait for it is bounded here.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	var err error
	select {
	case err = <-started:
	case <-time.After(browserWait):
		err = fmt.Errorf("chromium did not start in %v", browserWait)
	}
	if err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return &browser{t: t, ctx: ctx}
}

// tab is one browser tab.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// tab opens a new tab.
func (b *browser) tab() *tab {
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("open a tab: %v", err)
	}
	return &tab{t: b.t, ctx: ctx}
}

// run runs steps in the tab, bounded by browserWait.
func (tb *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("browser: %s: %v", what, err)
	}
}

// value runs one step that returns a value in the tab.
func value[T any](tb *tab, what string, a chromedp.Action[T]) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// open navigates to url and waits for its body.
func (tb *tab) open(url string) {
	tb.t.Helper()
	tb.run("open "+url, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body")))
}

// text is the text of the first element sel matches, "" when none does.
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return value(tb, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel)))
}

// count is how many elements sel matches.
func (tb *tab) count(sel string) int {
	tb.t.Helper()
	return value(tb, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

// waitText waits until the first element sel matches says want.
func (tb *tab) waitText(sel, want string) string {
	tb.t.Helper()
	deadline := time.Now().Add(browserWait)
	last := ""
	for time.Now().Before(deadline) {
		if last = tb.text(sel); strings.Contains(last, want) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.t.Fatalf("browser: %s says %q, waited %v for %q", sel, last, browserWait, want)
	return ""
}

// click clicks the element sel matches, in one step in the page (a live
// page may swap the element for a fresh copy between a query and a click),
// and waits for the page it leads to.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	tb.run("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	value(tb, "click "+sel, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (e) e.click(); return !!e })()`, sel)))
	tb.run("the page after "+sel, chromedp.WaitReady(chromedp.CSS("body")))
}

// mark leaves a mark in the page's window that a reload would wipe.
func (tb *tab) mark() {
	tb.t.Helper()
	value(tb, "mark the page", chromedp.Evaluate[string](`window.kvliveMark = "still here"`))
}

// marked reports whether the page still has its mark: it was updated in
// place, not loaded again.
func (tb *tab) marked() bool {
	tb.t.Helper()
	return value(tb, "read the mark", chromedp.Evaluate[string](`window.kvliveMark || ""`)) == "still here"
}

// screenshot is the whole page as PNG.
func (tb *tab) screenshot() []byte {
	tb.t.Helper()
	return value(tb, "screenshot", chromedp.FullScreenshot(100))
}
