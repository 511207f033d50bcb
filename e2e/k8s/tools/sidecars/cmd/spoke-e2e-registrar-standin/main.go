// Command spoke-e2e-registrar-standin is a test stand-in for the Kubernetes CSI
// node-driver-registrar sidecar, used only by e2e/k8s because the Go module proxy does not
// serve the real one. It does what kubelet needs from the real one: asks the CSI driver its
// name (GetPluginInfo), serves the kubelet plugin-registration API on
// <plugin-registration-path>/<driver>-reg.sock and reports the driver's endpoint. Flags mirror
// the real sidecar's so the chart's node DaemonSet runs unchanged.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var (
	csiAddress       = flag.String("csi-address", "/csi/csi.sock", "CSI driver socket in this container")
	kubeletRegPath   = flag.String("kubelet-registration-path", "", "CSI driver socket as kubelet (the host) sees it")
	pluginRegPath    = flag.String("plugin-registration-path", "/registration", "kubelet's plugins_registry directory")
	mode             = flag.String("mode", "registration", "registration | kubelet-registration-probe")
	connectTimeout   = flag.Duration("timeout", 5*time.Minute, "bound on waiting for the CSI driver to answer GetPluginInfo")
	_                = flag.Int("v", 0, "log verbosity (accepted for compatibility; ignored)")
	registeredMarker = ""
)

// registrationServer answers kubelet's plugin watcher.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	driverName string
}

func (s *registrationServer) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driverName,
		Endpoint:          *kubeletRegPath,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *registrationServer) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		// Like the real sidecar: exit so that the container restarts and registration is retried.
		log.Fatalf("kubelet refused driver %q: %s", s.driverName, st.Error)
	}
	log.Printf("kubelet registered driver %q", s.driverName)
	if err := os.WriteFile(registeredMarker, []byte(s.driverName+"\n"), 0o644); err != nil {
		log.Printf("cannot write %s: %v", registeredMarker, err)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// driverName asks the CSI driver for its name, retrying until the driver answers or the
// timeout passes.
func driverName() (string, error) {
	conn, err := grpc.NewClient("unix://"+*csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline := time.Now().Add(*connectTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			return resp.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("GetPluginInfo on %s: %w", *csiAddress, err)
		}
		log.Printf("waiting for the CSI driver on %s: %v", *csiAddress, err)
		time.Sleep(time.Second)
	}
}

func main() {
	flag.Parse()
	log.SetPrefix("spoke-e2e-registrar-standin: ")
	registeredMarker = filepath.Join(filepath.Dir(*csiAddress), "registered-by-e2e-standin")
	if *mode == "kubelet-registration-probe" {
		if _, err := os.Stat(registeredMarker); err != nil {
			fmt.Fprintf(os.Stderr, "driver not registered with kubelet yet: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if *mode != "registration" {
		log.Fatalf("unknown --mode %q (registration | kubelet-registration-probe)", *mode)
	}
	if *kubeletRegPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	name, err := driverName()
	if err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(registeredMarker)
	sock := filepath.Join(*pluginRegPath, name+"-reg.sock")
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		log.Fatalf("removing stale %s: %v", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("listen on %s: %v", sock, err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registrationServer{driverName: name})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		srv.Stop()
		_ = os.Remove(sock)
		_ = os.Remove(registeredMarker)
		os.Exit(0)
	}()
	log.Printf("serving registration of %q on %s (endpoint %s)", name, sock, *kubeletRegPath)
	if err := srv.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
