package logging

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/grpclog"
)

// Capture sends what gRPC and OpenTelemetry log on their own into log, so that a binary
// writes one format: grpc-go's messages (its info as debug, which is chatty by design)
// and the errors the OpenTelemetry SDK reports (an exporter that cannot reach its
// collector, say) as warnings with component "otel". Call it once, before any gRPC
// connection or server exists: grpc-go's logger may not change afterwards.
func Capture(log *slog.Logger) {
	grpclog.SetLoggerV2(&grpcLogger{log: log.With("component", "grpc")})
	otelLog := log.With("component", "otel")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		otelLog.Warn("telemetry error", "error", err)
	}))
}

// grpcLogger is a grpclog.LoggerV2 over slog.
type grpcLogger struct{ log *slog.Logger }

func (g *grpcLogger) emit(level slog.Level, msg string) {
	g.log.Log(context.Background(), level, strings.TrimSuffix(msg, "\n"))
}

func (g *grpcLogger) Info(args ...any)   { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g *grpcLogger) Infoln(args ...any) { g.emit(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g *grpcLogger) Infof(format string, args ...any) {
	g.emit(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Warning(args ...any)   { g.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (g *grpcLogger) Warningln(args ...any) { g.emit(slog.LevelWarn, fmt.Sprintln(args...)) }
func (g *grpcLogger) Warningf(format string, args ...any) {
	g.emit(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Error(args ...any)   { g.emit(slog.LevelError, fmt.Sprint(args...)) }
func (g *grpcLogger) Errorln(args ...any) { g.emit(slog.LevelError, fmt.Sprintln(args...)) }
func (g *grpcLogger) Errorf(format string, args ...any) {
	g.emit(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Fatal(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g *grpcLogger) Fatalln(args ...any)               { g.fatal(fmt.Sprintln(args...)) }
func (g *grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }

func (g *grpcLogger) fatal(msg string) {
	g.emit(slog.LevelError, msg)
	os.Exit(1)
}

// V reports whether grpc-go's verbose logs of level l are wanted: only at debug.
func (g *grpcLogger) V(l int) bool {
	return g.log.Enabled(context.Background(), slog.LevelDebug) && l <= 2
}
