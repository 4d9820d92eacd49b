// Package static holds the console's CSS and JS, embedded in the binary.
// Every asset is served under a content-hashed name with a one-year
// immutable cache lifetime: a new build changes the name, so browsers never
// run stale code and never revalidate current code.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed *.css *.js *.svg
var files embed.FS

type asset struct {
	body        []byte
	contentType string
}

var (
	byHashed = map[string]asset{}  // "style.3f2a9c1b0d.css" → asset
	hashed   = map[string]string{} // "style.css" → "style.3f2a9c1b0d.css"
)

func init() {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err) // the embed is fixed at build time
	}
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		ext := path.Ext(e.Name())
		name := strings.TrimSuffix(e.Name(), ext) + "." + hex.EncodeToString(sum[:5]) + ext
		ct := mime.TypeByExtension(ext)
		if ext == ".svg" {
			ct = "image/svg+xml"
		}
		if ext == ".js" {
			ct = "text/javascript; charset=utf-8"
		}
		byHashed[name] = asset{body: b, contentType: ct}
		hashed[e.Name()] = name
	}
}

// Prefix is where the console mounts Handler.
const Prefix = "/static/"

// URL returns the content-hashed URL of an embedded file such as
// "style.css". An unknown name panics: it is a programming error that every
// page render would hit, so tests catch it.
func URL(name string) string {
	h, ok := hashed[name]
	if !ok {
		panic("static: no embedded file " + name)
	}
	return Prefix + h
}

// Handler serves hashed names with immutable caching; anything else is 404.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := byHashed[strings.TrimPrefix(r.URL.Path, Prefix)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(a.body)
	})
}
