package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// FloorMain is `bench floor`: the capacity step's floor, a reader that opens conns
// connections to the event server as client-go makes them (TLS, HTTP/2), one watch on each
// (the URL and Accept the controller's Node watches used), and reads every byte into
// io.Discard: what decrypting and unframing the events costs before anything reads them.
// It runs until it is interrupted; a watch that ends is opened again.
func FloorMain(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	target := fs.String("url", "", "watch URL")
	accept := fs.String("accept", "", "Accept header of the watch")
	caPath := fs.String("ca", "", "the event server's CA (PEM)")
	conns := fs.Int("conns", 1, "connections, one watch each")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ca, err := os.ReadFile(*caPath)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var wg sync.WaitGroup
	for range *conns {
		// A Dial of its own keeps client-go from sharing one cached transport among the
		// configs, as the controller's connections do not share theirs.
		cfg := &rest.Config{Host: "https://placeholder", TLSClientConfig: rest.TLSClientConfig{CAData: ca}, BearerToken: "floor",
			UserAgent: "hub-node-metadata-bench-floor", Dial: (&net.Dialer{}).DialContext}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				if err := readWatch(ctx, hc, *target, *accept, buf); err != nil && ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "bench floor:", err)
					time.Sleep(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

func readWatch(ctx context.Context, hc *http.Client, target, accept string, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	_, err = io.CopyBuffer(io.Discard, resp.Body, buf)
	return err
}
