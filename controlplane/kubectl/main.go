// Command kubectl is the stock kubectl client, built from the published
// k8s.io/kubectl module so tests can apply, render and query with the real
// tool instead of a look-alike.
package main

import (
	"os"

	// The auth provider plugins a stock kubectl registers.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// -v is honoured while the command is still being put together (plugin
	// lookup, kuberc), before cobra has parsed any flag.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	root := cmd.NewDefaultKubectlCommand()
	// cli runs the command with component-base's flag and logging setup; the
	// error, if any, is printed the kubectl way with kubectl's exit code.
	if err := cli.RunNoErrOutput(root); err != nil {
		cmdutil.CheckErr(err)
	}
}
