package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
)

// bulkMax is the most rows one bulk action changes: a filter that matches more is to be
// narrowed first.
const bulkMax = 10000

// bulkFilter reads the list's filter from r (status, target, error class, since, until;
// never a page cursor): the rows a bulk action applies to. A since back from now is
// resolved to the time it means, in the values too, so that the preview's form confirms
// the rows of the same window however long later it is posted.
func (c *Console) bulkFilter(r *http.Request) (url.Values, store.Filter, error) {
	v := url.Values{}
	for _, k := range []string{"status", "target", "error_class", "since", "until"} {
		if s := strings.TrimSpace(r.Form.Get(k)); s != "" {
			v.Set(k, s)
		}
	}
	f, err := failed.Query{Status: v.Get("status"), Target: v.Get("target"), ErrorClass: v.Get("error_class"),
		Since: v.Get("since"), Until: v.Get("until"), Limit: fmt.Sprint(store.MaxListLimit)}.Filter(c.now())
	if err == nil && v.Has("since") {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	return v, f, err
}

// matching returns the ids of the rows f selects, newest first, at most bulkMax+1 of
// them.
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

// preview is the exact set of rows a bulk action's preview showed, carried by its
// confirmation form: the largest id the filter matched (rows recorded later are not in
// the set), how many rows, and a digest of their ids. The confirmed action changes the
// rows the filter matches up to that id only while they are still that set.
type preview struct {
	UpTo  int64  // the largest id; 0 when no row matched
	Count int    // how many rows
	Set   string // digest of the ids
}

// previewOf is the preview of ids, newest first.
func previewOf(ids []int64) preview {
	h := sha256.New()
	for _, id := range ids {
		h.Write(strconv.AppendInt(nil, id, 10))
		h.Write([]byte{','})
	}
	p := preview{Count: len(ids), Set: hex.EncodeToString(h.Sum(nil)[:16])}
	if len(ids) > 0 {
		p.UpTo = ids[0]
	}
	return p
}

// previewFromForm reads the preview a confirmation form carries; false when it carries
// none.
func previewFromForm(form url.Values) (preview, bool) {
	upTo, err1 := strconv.ParseInt(form.Get("upto"), 10, 64)
	count, err2 := strconv.Atoi(form.Get("rows"))
	p := preview{UpTo: upTo, Count: count, Set: form.Get("set")}
	return p, err1 == nil && err2 == nil && upTo >= 0 && p.Set != ""
}

// bulk previews a bulk action (GET: how many rows the filter matches, a reason to give)
// and carries it out (POST) on exactly the rows the preview counted: when they changed
// meanwhile (a row left the filter, or more than bulkMax match), nothing is changed and
// the answer is 409 with a new preview. Rows recorded after the preview are never in it.
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
	if r.Method == http.MethodGet {
		c.preview(w, r, http.StatusOK, action, v, f, "")
		return
	}
	shown, ok := previewFromForm(r.PostForm)
	if !ok {
		c.preview(w, r, http.StatusConflict, action, v, f, "Nothing was changed: a bulk action confirms a preview. Here it is; confirm it to go on.")
		return
	}
	var ids []int64
	if shown.UpTo > 0 {
		upTo := f
		upTo.AfterID = shown.UpTo + 1 // List's cursor: ids below it
		if ids, err = c.matching(r.Context(), upTo); err != nil {
			c.storeFail(w, r, "find the matching failed sends", err)
			return
		}
	}
	if previewOf(ids) != shown || len(ids) > bulkMax {
		c.preview(w, r, http.StatusConflict, action, v, f, fmt.Sprintf("The matching rows changed since the preview, which showed %d: "+
			"nothing was changed. Here is the new preview; confirm it to go on.", shown.Count))
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var done []int64
	switch action {
	case "retry":
		done, err = c.failed.Retry(store.WithAuthor(r.Context(), operatorOf(r)), ids)
	case "discard":
		if reason == "" {
			c.preview(w, r, http.StatusBadRequest, action, v, f, "Say why these alerts are discarded: the reason is kept with each row.")
			return
		}
		done, err = c.failed.Discard(store.WithAuthor(r.Context(), operatorOf(r)), ids, reason)
	}
	if err != nil {
		c.storeFail(w, r, action+" the failed sends", err)
		return
	}
	c.logger.Info("console: bulk "+action, "filter", v.Encode(), "up_to", shown.UpTo, "matched", len(ids), "changed", len(done),
		"reason", reason, "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	msg := fmt.Sprintf("%s: %d of the %d previewed rows (the others are in a state that does not change).", actions[action], len(done), len(ids))
	v.Set("done", msg)
	http.Redirect(w, r, Prefix+"failed?"+v.Encode(), http.StatusSeeOther)
}

// preview shows how many rows f matches now, with the form that confirms action on
// exactly them, answering status with the message msg ("" for none).
func (c *Console) preview(w http.ResponseWriter, r *http.Request, status int, action string, v url.Values, f store.Filter, msg string) {
	ids, err := c.matching(r.Context(), f)
	if err != nil {
		c.storeFail(w, r, "find the matching failed sends", err)
		return
	}
	p := previewOf(ids)
	data := map[string]any{"Action": action, "Verb": actions[action], "Filter": v, "Count": p.Count, "Max": bulkMax,
		"Preview": p, "Back": template.URL(v.Encode())} // encoded by url.Values: safe in an href
	if msg != "" {
		data["Error"] = msg
	}
	if len(ids) > bulkMax {
		data["TooMany"] = true
	}
	c.render(w, r, status, "bulk", data)
}
