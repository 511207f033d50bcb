// Command spoke-e2e-livenessprobe-standin is a test stand-in for the Kubernetes CSI
// livenessprobe sidecar, used only by e2e/k8s because the Go module proxy does not serve the
// real one. GET /healthz calls the driver's CSI Probe and answers 200 only when the driver
// answers ready within --probe-timeout. Flags mirror the real sidecar's.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	csiAddress   = flag.String("csi-address", "/csi/csi.sock", "CSI driver socket")
	probeTimeout = flag.Duration("probe-timeout", time.Second, "bound on one CSI Probe call")
	healthPort   = flag.Int("health-port", 9808, "TCP port of /healthz")
	httpEndpoint = flag.String("http-endpoint", "", "address of /healthz; overrides --health-port")
	_            = flag.Int("v", 0, "log verbosity (accepted for compatibility; ignored)")
)

func main() {
	flag.Parse()
	log.SetPrefix("spoke-e2e-livenessprobe-standin: ")
	conn, err := grpc.NewClient("unix://"+*csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	identity := csi.NewIdentityClient(conn)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), *probeTimeout)
		defer cancel()
		resp, err := identity.Probe(ctx, &csi.ProbeRequest{})
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("CSI Probe failed: %v", err), http.StatusInternalServerError)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			http.Error(w, "CSI driver reports not ready", http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	addr := *httpEndpoint
	if addr == "" {
		addr = fmt.Sprintf(":%d", *healthPort)
	}
	log.Printf("serving /healthz on %s for %s", addr, *csiAddress)
	log.Fatal(http.ListenAndServe(addr, nil))
}
