package main

import (
	"debug/elf"
	"testing"

	"palisade.dev/palisade/test/testbed/gobin"
)

// The controller's binary holds the EC2 operations the aws provider calls and none of the
// others. Once *ec2.Client is made an interface value (ec2.NewDescribeVolumesPaginator takes
// one), the linker keeps every operation of the client, about 700: the binary grows from 100 to
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
		t.Fatal(err)
	}
	const client = "github.com/aws/aws-sdk-go-v2/service/ec2.(*Client)."
	has := map[string]bool{}
	for _, s := range syms {
		has[s.Name] = true
	}
	for _, op := range []string{"StopInstances", "StartInstances", "DescribeInstances", "DescribeVolumes", "DetachVolume"} {
		if !has[client+op] {
			t.Errorf("the binary has no %s%s, which the aws provider calls", client, op)
		}
	}
	for _, op := range []string{"RunInstances", "CreateVpc", "DescribeImages", "DescribeVolumesModifications"} {
		if has[client+op] {
			t.Errorf("the binary holds %s%s, which nothing calls: *ec2.Client has been made an interface value, and every operation of it is linked in (use the client's concrete type, page by NextToken)", client, op)
		}
	}
}
