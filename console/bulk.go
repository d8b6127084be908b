package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
)

// bulkMax is the most rows one bulk action changes: a filter that matches more is to be
// narrowed first.
const bulkMax = 10000

// bulkFilter reads the list's filter from r (status, target, error class, since, until;
// never a page cursor): the rows a bulk action applies to.
func (c *Console) bulkFilter(r *http.Request) (url.Values, store.Filter, error) {
	v := url.Values{}
	for _, k := range []string{"status", "target", "error_class", "since", "until"} {
		if s := strings.TrimSpace(r.Form.Get(k)); s != "" {
			v.Set(k, s)
		}
	}
	f, err := failed.Query{Status: v.Get("status"), Target: v.Get("target"), ErrorClass: v.Get("error_class"),
		Since: v.Get("since"), Until: v.Get("until"), Limit: fmt.Sprint(store.MaxListLimit)}.Filter(c.now())
	return v, f, err
}

// matching returns the ids of the rows f selects, at most bulkMax+1 of them.
func (c *Console) matching(ctx context.Context, f store.Filter) ([]int64, error) {
	var ids []int64
	for {
		rows, next, err := c.failed.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == 0 || len(ids) > bulkMax {
			return ids, nil
		}
		f.AfterID = next
	}
}

// bulk previews a bulk action (GET: how many rows the filter matches, a reason to give)
// and carries it out (POST), on every row the list's filter selects.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if _, ok := actions[action]; !ok {
		c.fail(w, r, http.StatusNotFound, "There is no such action.")
		return
	}
	_ = r.ParseForm()
	v, f, err := c.bulkFilter(r)
	if perr := (*failed.ParamError)(nil); errors.As(err, &perr) {
		c.fail(w, r, http.StatusBadRequest, "The filter's "+strings.ReplaceAll(perr.Param, "_", " ")+" is wrong: "+perr.Reason+".")
		return
	}
	if len(v) == 0 {
		c.fail(w, r, http.StatusBadRequest, "A bulk action needs a filter (a status, a target, an error class or a time): it never applies to the whole table.")
		return
	}
	ids, err := c.matching(r.Context(), f)
	if err != nil {
		c.storeFail(w, r, "find the matching failed sends", err)
		return
	}
	data := map[string]any{"Action": action, "Verb": actions[action], "Filter": v, "Count": len(ids), "Max": bulkMax,
		"Back": template.URL(v.Encode())} // encoded by url.Values: safe in an href
	if len(ids) > bulkMax {
		data["TooMany"] = true
		c.render(w, r, http.StatusOK, "bulk", data)
		return
	}
	if r.Method == http.MethodGet {
		c.render(w, r, http.StatusOK, "bulk", data)
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var done []int64
	switch action {
	case "retry":
		done, err = c.failed.Retry(r.Context(), ids)
	case "discard":
		if reason == "" {
			data["Error"] = "Say why these alerts are discarded: the reason is kept with each row."
			c.render(w, r, http.StatusBadRequest, "bulk", data)
			return
		}
		done, err = c.failed.Discard(r.Context(), ids, reason)
	}
	if err != nil {
		c.storeFail(w, r, action+" the failed sends", err)
		return
	}
	c.logger.Info("console: bulk "+action, "filter", v.Encode(), "matched", len(ids), "changed", len(done), "reason", reason, "remote", r.RemoteAddr)
	msg := fmt.Sprintf("%s: %d of the %d matching rows (the others are in a state that does not change).", actions[action], len(done), len(ids))
	v.Set("done", msg)
	http.Redirect(w, r, Prefix+"failed?"+v.Encode(), http.StatusSeeOther)
}
