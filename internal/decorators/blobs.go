package decorators

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Blobs in artifacts: a blob artifact (tool.Artifact.Data) is one entry of its type and
// media type; a list of values some of which are blobs is a multipart/mixed blob, since
// a JSON array cannot hold bytes.

// DefaultMediaType is the media type of a blob artifact that names none.
const DefaultMediaType = "application/octet-stream"

// MediaTypeList is the media type of a list artifact that holds blobs (ListArtifact).
const MediaTypeList = "multipart/mixed"

// typeNameHeader is the header of a list part that holds the element's type name.
const typeNameHeader = "Toolmesh-Type-Name"

// mediaTypeJSON is the media type of a list part that holds a JSON value.
const mediaTypeJSON = "application/json"

// ListArtifact is entries as one list artifact, of type "[]T" when all have type T and
// "[]any" otherwise. When all are JSON values it is their JSON array. When some are
// blobs it is a multipart/mixed blob (RFC 2046) with one part per entry, in order: the
// part's Content-Type is the blob's media type, or application/json for a JSON value,
// and its Toolmesh-Type-Name header the entry's type name. Elements reads either form
// back element by element. Its boundary is derived from the parts, so that the same
// entries always make the same bytes (a resumed run's replay makes the artifact again).
func ListArtifact(entries []tool.Entry) tool.Artifact {
	typ := "any"
	blobs := false
	for i, e := range entries {
		if i == 0 {
			typ = e.TypeName
		} else if e.TypeName != typ {
			typ = "any"
		}
		blobs = blobs || e.IsBlob()
	}
	if !blobs {
		elems := make([]json.RawMessage, len(entries))
		for i, e := range entries {
			elems[i] = e.JSON
		}
		raw, _ := json.Marshal(elems)
		return tool.Artifact{TypeName: "[]" + typ, JSON: raw}
	}
	sum := sha256.New()
	for _, e := range entries {
		sum.Write([]byte(e.TypeName))
		sum.Write([]byte(e.MediaType))
		sum.Write(e.JSON)
		sum.Write(e.Data)
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	// A boundary must not occur in the parts: one derived from them cannot, short of a
	// hash collision.
	_ = w.SetBoundary("toolmesh-" + hex.EncodeToString(sum.Sum(nil))[:40])
	for _, e := range entries {
		h := textproto.MIMEHeader{}
		h.Set(typeNameHeader, mime.QEncoding.Encode("utf-8", e.TypeName))
		body := []byte(e.JSON)
		if e.IsBlob() {
			h.Set("Content-Type", e.MediaType)
			body = e.Data
		} else {
			h.Set("Content-Type", mediaTypeJSON)
		}
		part, _ := w.CreatePart(h) // writes to a buffer: cannot fail
		_, _ = part.Write(body)
	}
	_ = w.Close()
	return tool.Artifact{TypeName: "[]" + typ, Data: buf.Bytes(), MediaType: mime.FormatMediaType(MediaTypeList, map[string]string{"boundary": w.Boundary()})}
}

// blobElements is a blob artifact as entries: its parts, when it is a list of type
// "[]X" (or "X[]", "list<X>") and of media type multipart/mixed whose parts all read;
// otherwise the blob itself, of media type DefaultMediaType when it names none.
func blobElements(a *tool.Artifact) []tool.Entry {
	mt := a.MediaType
	if mt == "" {
		mt = DefaultMediaType
	}
	whole := []tool.Entry{{TypeName: a.TypeName, Data: a.Data, MediaType: mt}}
	elemType := ElementType(a.TypeName)
	if elemType == a.TypeName {
		return whole
	}
	base, params, err := mime.ParseMediaType(mt)
	if err != nil || base != MediaTypeList || params["boundary"] == "" {
		return whole
	}
	r := multipart.NewReader(bytes.NewReader(a.Data), params["boundary"])
	var out []tool.Entry
	var dec mime.WordDecoder
	for {
		// NextRawPart: a part's bytes as they are, whatever transfer encoding it names.
		p, err := r.NextRawPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			return whole
		}
		body, err := io.ReadAll(p)
		if err != nil {
			return whole
		}
		typ := elemType
		if name := p.Header.Get(typeNameHeader); name != "" {
			if d, err := dec.DecodeHeader(name); err == nil && d != "" {
				typ = d
			}
		}
		ct := strings.TrimSpace(p.Header.Get("Content-Type"))
		if ct == "" {
			ct = DefaultMediaType
		}
		if pt, _, err := mime.ParseMediaType(ct); err == nil && pt == mediaTypeJSON && json.Valid(body) {
			out = append(out, tool.Entry{TypeName: typ, JSON: body})
			continue
		}
		out = append(out, tool.Entry{TypeName: typ, Data: body, MediaType: ct})
	}
}
