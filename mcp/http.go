package mcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions tune ServeHTTP.
type HTTPOptions struct {
	// Addr is host:port, or :port / port for the loopback address.
	Addr string
	// Token, when set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN). Required unless Addr is loopback.
	Token string
	// Stateless serves each request on its own temporary session: no
	// Mcp-Session-Id, any replica can answer, no server-to-client
	// requests.
	Stateless bool
	// Ready, when set, is called with the address listened on (useful
	// with port 0) before serving.
	Ready func(addr string)
}

// ErrNeedToken: a non-loopback address without a bearer token.
var ErrNeedToken = errors.New("a bearer token is required to listen beyond loopback")

// ListenAddr resolves HTTPOptions.Addr: a missing host is the loopback
// address. It reports whether the address is loopback-only.
func ListenAddr(addr string) (string, bool, error) {
	if addr == "" {
		return "", false, errors.New("no address: give HOST:PORT or :PORT")
	}
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("address %q: %w (give HOST:PORT or :PORT)", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	return net.JoinHostPort(host, port), loopback, nil
}

// Handler is the streamable HTTP handler of s, behind the bearer token
// when one is given.
func (s *Server) Handler(token string, stateless bool) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv },
		&sdk.StreamableHTTPOptions{Stateless: stateless})
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
			http.Error(w, "missing or wrong bearer token (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP serves s over streamable HTTP until ctx ends. It refuses a
// non-loopback address without a token before it listens.
func (s *Server) ServeHTTP(ctx context.Context, o HTTPOptions) error {
	addr, loopback, err := ListenAddr(o.Addr)
	if err != nil {
		return err
	}
	if !loopback && o.Token == "" {
		return fmt.Errorf("%s: %w: set STRATA_MCP_TOKEN or --token-file, or listen on 127.0.0.1", addr, ErrNeedToken)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(o.Token, o.Stateless), ReadHeaderTimeout: 10 * time.Second}
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}
