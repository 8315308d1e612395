package main

import (
	"fmt"
	"slices"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// refPrefix is what refCallback puts in front of a definition name, so that
// a $ref can be told apart from an inline schema and mapped back to its name.
const refPrefix = "#/definitions/"

// Definition names (Go import path and type name, as openapi-gen writes them)
// that cannot be expanded field by field and get a fixed schema instead.
const (
	defQuantity     = "k8s.io/apimachinery/pkg/api/resource.Quantity"
	defIntOrString  = "k8s.io/apimachinery/pkg/util/intstr.IntOrString"
	defRawExtension = "k8s.io/apimachinery/pkg/runtime.RawExtension"
	defFieldsV1     = "k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1"
	defTime         = "k8s.io/apimachinery/pkg/apis/meta/v1.Time"
	defMicroTime    = "k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime"
	defObjectMeta   = "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta"
)

// quantityPattern is the pattern the Kubernetes API server and controller-gen
// use for resource.Quantity in CRD schemas, so a malformed quantity is
// rejected at admission as it is on a KubeVirt cluster.
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// Extensions copied from the OpenAPI definitions. openapi-gen also writes
// patch strategy and union extensions, which have no meaning in a CRD schema.
const (
	extListType    = "x-kubernetes-list-type"
	extListMapKeys = "x-kubernetes-list-map-keys"
	extMapType     = "x-kubernetes-map-type"
)

// refCallback names a definition the way resolve reads it back.
func refCallback(name string) spec.Ref {
	return spec.MustCreateRef(refPrefix + common.EscapeJsonPointer(name))
}

// converter turns openapi-gen definitions into one self-contained structural
// schema: every $ref is inlined, because a CRD schema cannot refer to
// anything outside itself.
type converter struct {
	defs map[string]common.OpenAPIDefinition
	// path holds the definitions being expanded, outermost first, to stop
	// on a type that contains itself.
	path []string
}

func newConverter(defs map[string]common.OpenAPIDefinition) *converter {
	return &converter{defs: defs}
}

// root converts the top-level definition of a kind. Its metadata is left
// to the API server, which validates ObjectMeta itself and only allows
// constraints on name and generateName in a CRD schema.
func (c *converter) root(name string) (*apiextv1.JSONSchemaProps, error) {
	def, ok := c.defs[name]
	if !ok {
		return nil, fmt.Errorf("no OpenAPI definition %q", name)
	}
	c.path = []string{name}
	defer func() { c.path = nil }()

	out, err := c.convert(def.Schema, name)
	if err != nil {
		return nil, err
	}
	if _, ok := out.Properties["metadata"]; ok {
		out.Properties["metadata"] = apiextv1.JSONSchemaProps{Type: "object"}
	}
	return &out, nil
}

// convert translates one schema node. where names the node in errors.
func (c *converter) convert(s spec.Schema, where string) (apiextv1.JSONSchemaProps, error) {
	if ref := s.Ref.String(); ref != "" {
		return c.resolve(ref, s.Description, where)
	}
	// openapi-gen wraps a reference in allOf when the field carries its own
	// default; the field then means exactly the referenced type.
	if len(s.AllOf) == 1 && len(s.Properties) == 0 && s.AllOf[0].Ref.String() != "" {
		desc := s.Description
		if desc == "" {
			desc = s.AllOf[0].Description
		}
		return c.resolve(s.AllOf[0].Ref.String(), desc, where)
	}
	if len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) > 0 || s.Not != nil {
		return apiextv1.JSONSchemaProps{}, fmt.Errorf("%s: unsupported allOf/anyOf/oneOf/not", where)
	}

	out := apiextv1.JSONSchemaProps{
		Description: s.Description,
		Format:      s.Format,
		Pattern:     s.Pattern,
		Maximum:     s.Maximum,
		Minimum:     s.Minimum,
		MaxLength:   s.MaxLength,
		MinLength:   s.MinLength,
		MaxItems:    s.MaxItems,
		MinItems:    s.MinItems,
		// Defaults are deliberately not copied: openapi-gen writes the Go
		// zero value of every non-pointer field as its default, which a CRD
		// would then apply to every object. KubeVirt's own CRDs (made by
		// controller-gen) default only a handful of fields.
		// Enums are not copied either: openapi-gen emits them from
		// Kubernetes' +enum markers, which KubeVirt's CRDs do not enforce.
	}
	out.ExclusiveMaximum = s.ExclusiveMaximum
	out.ExclusiveMinimum = s.ExclusiveMinimum
	if len(s.Type) > 1 {
		return out, fmt.Errorf("%s: several types %v", where, s.Type)
	}
	if len(s.Type) == 1 {
		out.Type = s.Type[0]
	}
	if out.Type == "" && (len(s.Properties) > 0 || s.AdditionalProperties != nil) {
		out.Type = "object"
	}
	out.Format = typedFormat(out.Type, out.Format)
	if err := c.copyExtensions(&out, s, where); err != nil {
		return out, err
	}

	switch out.Type {
	case "object":
		if err := c.convertObject(&out, s, where); err != nil {
			return out, err
		}
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			return out, fmt.Errorf("%s: array without a single items schema", where)
		}
		item, err := c.convert(*s.Items.Schema, where+"[]")
		if err != nil {
			return out, err
		}
		out.Items = &apiextv1.JSONSchemaPropsOrArray{Schema: &item}
	case "string", "integer", "number", "boolean":
	case "":
		return out, fmt.Errorf("%s: schema without a type", where)
	default:
		return out, fmt.Errorf("%s: unknown type %q", where, out.Type)
	}
	return out, nil
}

func (c *converter) convertObject(out *apiextv1.JSONSchemaProps, s spec.Schema, where string) error {
	if len(s.Properties) > 0 {
		out.Properties = make(map[string]apiextv1.JSONSchemaProps, len(s.Properties))
		for name, prop := range s.Properties {
			p, err := c.convert(prop, where+"."+name)
			if err != nil {
				return err
			}
			out.Properties[name] = p
		}
		out.Required = slices.Sorted(slices.Values(s.Required))
	}
	if ap := s.AdditionalProperties; ap != nil {
		if ap.Schema == nil {
			// additionalProperties: true/false carries no type; a map
			// without a value type has no place in a structural schema.
			return fmt.Errorf("%s: additionalProperties without a schema", where)
		}
		v, err := c.convert(*ap.Schema, where+"{}")
		if err != nil {
			return err
		}
		out.AdditionalProperties = &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: &v}
	}
	return nil
}

func (c *converter) copyExtensions(out *apiextv1.JSONSchemaProps, s spec.Schema, where string) error {
	if v, ok := s.Extensions.GetString(extListType); ok {
		out.XListType = &v
	}
	if v, ok := s.Extensions.GetString(extMapType); ok {
		out.XMapType = &v
	}
	if raw, ok := s.Extensions[extListMapKeys]; ok {
		keys, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("%s: %s is %T, want a list", where, extListMapKeys, raw)
		}
		for _, k := range keys {
			ks, ok := k.(string)
			if !ok {
				return fmt.Errorf("%s: %s holds %T, want strings", where, extListMapKeys, k)
			}
			out.XListMapKeys = append(out.XListMapKeys, ks)
		}
	}
	return nil
}

// resolve inlines the definition a $ref points at. desc is the referring
// field's own description, which wins over the type's, as in controller-gen.
func (c *converter) resolve(ref, desc, where string) (apiextv1.JSONSchemaProps, error) {
	name, ok := strings.CutPrefix(ref, refPrefix)
	if !ok {
		return apiextv1.JSONSchemaProps{}, fmt.Errorf("%s: foreign $ref %q", where, ref)
	}
	name = unescapeJSONPointer(name)

	out, err := c.resolveName(name, where)
	if err != nil {
		return out, err
	}
	if desc != "" {
		out.Description = desc
	}
	return out, nil
}

func (c *converter) resolveName(name, where string) (apiextv1.JSONSchemaProps, error) {
	def, ok := c.defs[name]
	if !ok {
		return apiextv1.JSONSchemaProps{}, fmt.Errorf("%s: no OpenAPI definition %q", where, name)
	}
	desc := def.Schema.Description
	switch name {
	case defQuantity:
		return apiextv1.JSONSchemaProps{
			Description:  desc,
			AnyOf:        []apiextv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
			Pattern:      quantityPattern,
			XIntOrString: true,
		}, nil
	case defIntOrString:
		return apiextv1.JSONSchemaProps{
			Description:  desc,
			AnyOf:        []apiextv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
			XIntOrString: true,
		}, nil
	case defRawExtension, defFieldsV1:
		// Truly free-form JSON objects: keep whatever the client sends.
		return apiextv1.JSONSchemaProps{
			Description:            desc,
			Type:                   "object",
			XPreserveUnknownFields: ptrTo(true),
		}, nil
	case defTime, defMicroTime:
		// Go writes a zero metav1.Time as null.
		return apiextv1.JSONSchemaProps{
			Description: desc,
			Type:        "string",
			Format:      "date-time",
			Nullable:    true,
		}, nil
	}
	if slices.Contains(c.path, name) {
		// A type that contains itself cannot be inlined; structural
		// schemas have no references. Stop here and keep the value as
		// it comes, as controller-gen's Schemaless marker would.
		return apiextv1.JSONSchemaProps{
			Description:            desc,
			Type:                   "object",
			XPreserveUnknownFields: ptrTo(true),
		}, nil
	}
	c.path = append(c.path, name)
	defer func() { c.path = c.path[:len(c.path)-1] }()
	return c.convert(def.Schema, where)
}

// typedFormat keeps a format only where it describes the JSON type:
// openapi-gen writes "byte" for a Go uint8, which in OpenAPI means a base64
// string.
func typedFormat(typ, format string) string {
	switch typ {
	case "integer":
		if format == "int32" || format == "int64" {
			return format
		}
		return ""
	case "number":
		if format == "float" || format == "double" {
			return format
		}
		return ""
	case "string":
		return format
	}
	return ""
}

// unescapeJSONPointer undoes common.EscapeJsonPointer.
func unescapeJSONPointer(s string) string {
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
}

func ptrTo[T any](v T) *T { return &v }
