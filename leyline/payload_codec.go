package leyline

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The payload codec turns a typed payload into JSON and back without
// losing anything:
//
//   - keys are the fields' `json` tag names (snake_case);
//   - a field tagged `esper:"required"` must be present and non-null when
//     decoding; presence is what counts, so a required 0 or false is fine;
//   - a pointer field is an optional measurement: nil encodes as null and
//     null or an absent key decodes as nil, never as 0;
//   - an absent optional non-pointer field keeps its default (see
//     payloadDefaulter);
//   - unknown keys are rejected, so a typo fails loudly;
//   - floats are written with the shortest representation that parses
//     back to the same bits; JSON has no NaN or infinity, so those are
//     written as the strings "NaN", "Infinity" and "-Infinity" (the
//     spelling of JavaScript and of Python's json module) and read back;
//   - integers must be JSON integers ("1.0" and "1e3" are rejected);
//   - types with MarshalText (SeedStage) are written as their text.
//
// The codec only sees payload types declared in this package; it is
// reflection-based, so it runs per event, never per element of a hot
// loop.

// payloadDefaulter is implemented by payloads whose optional fields have
// a non-zero default; decoding applies it before reading the keys.
type payloadDefaulter interface {
	applyDefaults()
}

// Non-finite float spellings.
const (
	jsonNaN    = "NaN"
	jsonPosInf = "Infinity"
	jsonNegInf = "-Infinity"
)

var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// payloadName is the payload's type name without "Payload", for errors.
func payloadName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.TrimSuffix(t.Name(), "Payload")
}

// encodePayload returns the JSON object of a payload (a pointer to a
// struct).
func encodePayload(p Payload) ([]byte, error) {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("leyline: payload %T must be a non-nil pointer to a struct", p)
	}
	tree, err := encodeValue(v.Elem(), payloadName(v.Type()))
	if err != nil {
		return nil, err
	}
	return json.Marshal(tree)
}

func encodeFloat(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return jsonNaN
	case math.IsInf(f, 1):
		return jsonPosInf
	case math.IsInf(f, -1):
		return jsonNegInf
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, bits))
}

// encodeValue converts v into a tree of json-encodable values.
func encodeValue(v reflect.Value, path string) (any, error) {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, nil
		}
		return encodeValue(v.Elem(), path)
	}
	if t.Implements(textMarshalerType) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, fmt.Errorf("leyline: %s: %w", path, err)
		}
		return string(b), nil
	}
	switch t.Kind() {
	case reflect.Float32:
		return encodeFloat(v.Float(), 32), nil
	case reflect.Float64:
		return encodeFloat(v.Float(), 64), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint(), nil
	case reflect.Bool:
		return v.Bool(), nil
	case reflect.String:
		return v.String(), nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && v.IsNil() {
			return nil, nil
		}
		out := make([]any, v.Len())
		for i := range out {
			e, err := encodeValue(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("leyline: %s: map key %s is not a string", path, t.Key())
		}
		if v.IsNil() {
			return nil, nil
		}
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			k := it.Key().String()
			e, err := encodeValue(it.Value(), path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = e
		}
		return out, nil
	case reflect.Struct:
		out := make(map[string]any, t.NumField())
		for i := range t.NumField() {
			f := t.Field(i)
			key, _, ok := fieldKey(f)
			if !ok {
				continue
			}
			e, err := encodeValue(v.Field(i), path+"."+key)
			if err != nil {
				return nil, err
			}
			out[key] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("leyline: %s: cannot encode %s", path, t)
}

// fieldKey returns a struct field's JSON key and whether it is required;
// ok is false for fields the codec skips (unexported or tagged "-").
func fieldKey(f reflect.StructField) (key string, required, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", false, false
	}
	if name == "" {
		name = f.Name
	}
	return name, f.Tag.Get("esper") == "required", true
}

// decodePayload reads a JSON object into p (a pointer to a struct).
func decodePayload(data []byte, p Payload) error {
	v := reflect.ValueOf(p)
	name := payloadName(v.Type())
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("leyline: %s payload: %w", name, err)
	}
	if d, ok := p.(payloadDefaulter); ok {
		d.applyDefaults()
	}
	return decodeValue(tree, v.Elem(), name, name)
}

// decodeValue stores the decoded JSON value raw into v; path names the
// field for errors and payload the payload type.
func decodeValue(raw any, v reflect.Value, path, payload string) error {
	t := v.Type()
	bad := func(want string) error {
		return fmt.Errorf("leyline: %s payload: field %q: want %s, got %T %v", payload, path, want, raw, raw)
	}
	if t.Kind() == reflect.Pointer {
		if raw == nil {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t.Elem())
		if err := decodeValue(raw, nv.Elem(), path, payload); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && t.Implements(textMarshalerType) {
		s, ok := raw.(string)
		if !ok {
			return bad("a string")
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("leyline: %s payload: field %q: %w", payload, path, err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		var f float64
		switch x := raw.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(x), t.Bits()); err != nil {
				return bad("a number")
			}
		case string:
			switch x {
			case jsonNaN:
				f = math.NaN()
			case jsonPosInf:
				f = math.Inf(1)
			case jsonNegInf:
				f = math.Inf(-1)
			default:
				return bad(`a number, "NaN", "Infinity" or "-Infinity"`)
			}
		default:
			return bad("a number")
		}
		v.SetFloat(f)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x, ok := raw.(json.Number)
		if !ok {
			return bad("an integer")
		}
		i, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return bad("an integer in range")
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x, ok := raw.(json.Number)
		if !ok {
			return bad("a non-negative integer")
		}
		u, err := strconv.ParseUint(string(x), 10, 64)
		if err != nil || v.OverflowUint(u) {
			return bad("a non-negative integer in range")
		}
		v.SetUint(u)
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			return bad("a bool")
		}
		v.SetBool(b)
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			return bad("a string")
		}
		v.SetString(s)
	case reflect.Slice:
		if raw == nil {
			v.SetZero()
			return nil
		}
		arr, ok := raw.([]any)
		if !ok {
			return bad("an array")
		}
		s := reflect.MakeSlice(t, len(arr), len(arr))
		for i, e := range arr {
			if err := decodeValue(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i), payload); err != nil {
				return err
			}
		}
		v.Set(s)
	case reflect.Map:
		if raw == nil {
			v.SetZero()
			return nil
		}
		obj, ok := raw.(map[string]any)
		if !ok {
			return bad("an object")
		}
		m := reflect.MakeMapWithSize(t, len(obj))
		for k, e := range obj {
			ev := reflect.New(t.Elem()).Elem()
			if err := decodeValue(e, ev, path+"."+k, payload); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
		}
		v.Set(m)
	case reflect.Struct:
		obj, ok := raw.(map[string]any)
		if !ok {
			return bad("an object")
		}
		known := make(map[string]bool, t.NumField())
		for i := range t.NumField() {
			key, required, ok := fieldKey(t.Field(i))
			if !ok {
				continue
			}
			known[key] = true
			fpath := key
			if path != payload {
				fpath = path + "." + key
			}
			e, present := obj[key]
			if !present || e == nil {
				if required {
					return fmt.Errorf("leyline: %s payload: %w: %q", payload, ErrMissingField, fpath)
				}
				if !present {
					continue // keep the default
				}
				switch t.Field(i).Type.Kind() {
				case reflect.Pointer, reflect.Slice, reflect.Map:
				default:
					return fmt.Errorf("leyline: %s payload: field %q must not be null", payload, fpath)
				}
			}
			if err := decodeValue(e, v.Field(i), fpath, payload); err != nil {
				return err
			}
		}
		var unknown []string
		for k := range obj {
			if !known[k] {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("leyline: %s payload: unknown fields %q", payload, unknown)
		}
	default:
		return fmt.Errorf("leyline: %s payload: field %q: cannot decode into %s", payload, path, t)
	}
	return nil
}

// missingRequiredString reports the first required string field of the struct
// p points to that is empty, for the payloads' Validate methods.
func missingRequiredString(p any) error {
	v := reflect.ValueOf(p)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return fmt.Errorf("leyline: nil payload %T", p)
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := range t.NumField() {
		key, required, ok := fieldKey(t.Field(i))
		if ok && required && t.Field(i).Type.Kind() == reflect.String && v.Field(i).String() == "" {
			return errMissing(payloadName(t), key)
		}
	}
	return nil
}
