// Command etcd is a thin wrapper main around go.etcd.io/etcd/server/v3/etcdmain,
// built by hack/cluster-tools/build.sh for the local test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
