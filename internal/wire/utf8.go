package wire

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// CheckUTF8 reports the first string field of m, at any depth, that is not valid UTF-8,
// which protocol buffers refuse to encode (gRPC then fails the whole call with a bare
// INTERNAL status). The error names the field's path ("artifact.artifact.type_name",
// "blackboard_updates[2].json"). nil means m can be sent.
func CheckUTF8(m protoreflect.Message) error {
	if path := badUTF8(m, ""); path != "" {
		return fmt.Errorf("%s: not valid UTF-8", path)
	}
	return nil
}

// badUTF8 is the path of m's first string that is not UTF-8 under prefix, or "".
func badUTF8(m protoreflect.Message, prefix string) string {
	var bad string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		bad = badValue(fd, v, prefix+string(fd.Name()))
		return bad == ""
	})
	return bad
}

// badValue is badUTF8 for one set field.
func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch {
	case fd.IsList():
		l := v.List()
		for i := range l.Len() {
			if bad := badItem(fd, l.Get(i), fmt.Sprintf("%s[%d]", path, i)); bad != "" {
				return bad
			}
		}
	case fd.IsMap():
		var bad string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
				bad = path + " (a key)"
				return false
			}
			bad = badItem(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", path, k.String()))
			return bad == ""
		})
		return bad
	default:
		return badItem(fd, v, path)
	}
	return ""
}

// badItem is badUTF8 for one value of a field (an element of a list or map).
func badItem(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return badUTF8(v.Message(), path+".")
	}
	return ""
}

// FixUTF8 replaces, in place, the bytes that are not UTF-8 in every string field of m, at
// any depth, with U+FFFD, so that m can be encoded. Map keys are left as they are.
func FixUTF8(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if nv, ok := fixItem(fd, l.Get(i)); ok {
					l.Set(i, nv)
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if nv, ok := fixItem(fd.MapValue(), mv); ok {
					mp.Set(k, nv)
				}
				return true
			})
		default:
			if nv, ok := fixItem(fd, v); ok {
				m.Set(fd, nv)
			}
		}
		return true
	})
}

// fixItem is FixUTF8 for one value: the string to set in its place, if it changed.
func fixItem(fd protoreflect.FieldDescriptor, v protoreflect.Value) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s := v.String(); !utf8.ValidString(s) {
			return protoreflect.ValueOfString(strings.ToValidUTF8(s, "\uFFFD")), true
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		FixUTF8(v.Message())
	}
	return v, false
}
