// Command etcd is the etcd server at the version go.mod pins, for the kind node image's etcd
// static pod (kubeadm 1.34 probes /livez and /readyz, which Debian's etcd 3.4 does not serve).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
