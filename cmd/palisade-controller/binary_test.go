package main

import (
	"debug/elf"
	"slices"
	"strings"
	"testing"
	"unicode"

	"palisade.dev/palisade/test/testbed/gobin"
)

// The controller's binary holds the EC2 operations the aws provider calls and none of the
// others. Once *ec2.Client is made an interface value (ec2.NewDescribeVolumesPaginator takes
// one), and as the binary also looks methods up by reflection (a dependency's), the linker keeps
// every exported method of the client, about 800 operations: the binary grows from 100 to
// 138 MB, and the controller's resident memory with the pages of it that are read.
func TestBinaryLeavesOutUnusedEC2Operations(t *testing.T) {
	bin, err := gobin.Build("cmd/palisade-controller")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("reading the symbols of %s (built without them, -ldflags=-s in GOFLAGS?): %v", bin, err)
	}
	const client = "github.com/aws/aws-sdk-go-v2/service/ec2.(*Client)."
	var ops []string
	for _, s := range syms {
		if op, ok := strings.CutPrefix(s.Name, client); ok && op != "" && unicode.IsUpper(rune(op[0])) {
			ops = append(ops, op)
		}
	}
	const called = 5 // Stop, Start and DescribeInstances, DescribeVolumes, DetachVolume
	if !slices.Contains(ops, "StopInstances") {
		t.Errorf("the binary has no %sStopInstances, which the aws provider calls: the test reads the wrong symbols", client)
	}
	if len(ops) > 2*called {
		t.Errorf("the binary holds %d exported methods of *ec2.Client, where the aws provider calls %d: it has been made an interface value, and every operation of it is linked in (use the client's concrete type, page by NextToken)",
			len(ops), called)
	}
}
