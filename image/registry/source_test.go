package registry

import "testing"

func TestParseSource(t *testing.T) {
	for in, want := range map[string]Source{
		"docker://quay.io/a/b:1":          {Transport: TransportDocker, Ref: "quay.io/a/b:1"},
		"127.0.0.1:5000/x/y:latest":       {Transport: TransportDocker, Ref: "127.0.0.1:5000/x/y:latest"},
		"localhost:5000/x":                {Transport: TransportDocker, Ref: "localhost:5000/x"},
		"debian:bookworm":                 {Transport: TransportDocker, Ref: "debian:bookworm"},
		"swebench/sweb.eval.x86_64.a:v1":  {Transport: TransportDocker, Ref: "swebench/sweb.eval.x86_64.a:v1"},
		"oci:/tmp/no-such-layout:env":     {Transport: TransportOCI, Ref: "/tmp/no-such-layout", Tag: "env"},
		"oci:/tmp/no-such-layout":         {Transport: TransportOCI, Ref: "/tmp/no-such-layout"},
		"docker-archive:/tmp/x.tar":       {Transport: TransportDockerArchive, Ref: "/tmp/x.tar"},
		"docker-archive:/tmp/x.tar:a/b:c": {Transport: TransportDockerArchive, Ref: "/tmp/x.tar", Tag: "a/b:c"},
	} {
		got, err := ParseSource(in)
		if err != nil || got != want {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "docker://", "oci:", "containers-storage:x"} {
		if _, err := ParseSource(in); err == nil {
			t.Errorf("ParseSource(%q): no error", in)
		}
	}
}
