package ctxcodec_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// rawCodec moves bytes as they are, so the test needs no protos.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "toolctx-test-raw" }

// TestCodecOverRealGRPC sends encoded contexts through a real gRPC connection, client
// to server as request metadata and back as response headers: gRPC accepts the keys
// and carries every value byte (CR, LF, NUL, unicode) unchanged. Only the test imports
// gRPC; the package does not.
func TestCodecOverRealGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cd := ctxcodec.Codec{}
	received := make(chan toolctx.Context, 1)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(stream.Context())
			c, err := cd.Decode(md)
			if err != nil {
				return err
			}
			received <- c
			back, err := cd.Encode(c.With("server", "ok\r\n"))
			if err != nil {
				return err
			}
			if err := stream.SetHeader(metadata.MD(back)); err != nil {
				return err
			}
			var msg []byte
			if err := stream.RecvMsg(&msg); err != nil {
				return err
			}
			return stream.SendMsg(&msg)
		}))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	sent := toolctx.MustOf(
		"tenantId", "acme",
		"Tenant.ID with Space", "line1\r\nline2\n",
		"租户", "值\x00🙂\x7f",
		":authority", "not a pseudo-header",
		"grpc-status", "13",
		"empty", "",
	).With(toolctx.LoopIDKey, "loop-1")
	md, err := cd.Encode(sent)
	if err != nil {
		t.Fatal(err)
	}
	var header metadata.MD
	req, resp := []byte("ping"), []byte(nil)
	err = conn.Invoke(metadata.NewOutgoingContext(ctx, metadata.MD(md)), "/toolctx.test.Echo/Echo", &req, &resp,
		grpc.ForceCodec(rawCodec{}), grpc.Header(&header))
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	select {
	case got := <-received:
		if diff := cmp.Diff(sent, got); diff != "" {
			t.Errorf("server received (-sent +got):\n%s", diff)
		}
	case <-ctx.Done():
		t.Fatal("server never received the call")
	}
	gotBack, err := cd.Decode(header)
	if err != nil {
		t.Fatalf("Decode(response header): %v", err)
	}
	if diff := cmp.Diff(sent.With("server", "ok\r\n"), gotBack); diff != "" {
		t.Errorf("client received (-want +got):\n%s", diff)
	}
}
