package spokecache

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// watchHeader is what a watch request carries: its Accept, and the user agent and bearer
// token that client-go's transport wrappers would add. A wrapper that adds a header clones
// the request first, and x/net keeps the request it is given for as long as the stream is
// open: with a token, two clones of each watch request, each with its own "Bearer " string,
// lived as long as the watch (about 1.5 KiB a watch). With the headers already there, the
// wrappers pass the request on as it is, and a spoke's watches share one "Bearer " string. A
// token can only be inline (a kubeconfig naming a token file is refused), so it never changes
// under a connection.
type watchHeader struct{ accept, userAgent, authorization string }

// newWatchHeader returns a spoke's watch header without its Accept: the spoke's kinds set
// theirs, and share its one "Bearer " string.
func newWatchHeader(cfg *rest.Config) watchHeader {
	h := watchHeader{userAgent: cfg.UserAgent}
	if cfg.BearerToken != "" {
		h.authorization = "Bearer " + cfg.BearerToken
	}
	return h
}

// build returns a new header for one request: what h has of its Accept, user agent and token.
func (h watchHeader) build() http.Header {
	out := make(http.Header, 3)
	h.each(func(k, v string) { out[k] = []string{v} })
	return out
}

// each calls set with each header h has (in canonical form), leaving out the empty ones.
func (h watchHeader) each(set func(k, v string)) {
	for _, kv := range [...][2]string{{"Accept", h.accept}, {"User-Agent", h.userAgent}, {"Authorization", h.authorization}} {
		if kv[1] != "" {
			set(kv[0], kv[1])
		}
	}
}
