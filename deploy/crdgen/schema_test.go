package main

import (
	"reflect"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

func obj(desc string, props map[string]spec.Schema, required ...string) common.OpenAPIDefinition {
	return common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
		Description: desc, Type: []string{"object"}, Properties: props, Required: required,
	}}}
}

func refTo(name, desc string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: refCallback(name), Description: desc}}
}

func TestConverter(t *testing.T) {
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Default: ""}}
	defs := map[string]common.OpenAPIDefinition{
		"test.Root": obj("root", map[string]spec.Schema{
			"metadata": refTo(defObjectMeta, ""),
			"spec":     refTo("test.Spec", "the spec"),
		}, "spec"),
		"test.Spec": obj("Spec type", map[string]spec.Schema{
			"size": refTo(defQuantity, ""),
			"port": refTo(defIntOrString, ""),
			"raw":  refTo(defRawExtension, ""),
			"when": refTo(defTime, ""),
			"node": refTo("test.Node", ""),
			"wrapped": {SchemaProps: spec.SchemaProps{
				Default: map[string]any{},
				AllOf:   []spec.Schema{refTo("test.Leaf", "")},
			}},
			"count": {SchemaProps: spec.SchemaProps{Type: []string{"integer"}, Format: "byte"}},
			"tags": {
				SchemaProps: spec.SchemaProps{
					Type:  []string{"array"},
					Items: &spec.SchemaOrArray{Schema: &str},
				},
				VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{extListType: "set"}},
			},
		}),
		// A type that contains itself, as a tree node would.
		"test.Node": obj("Node type", map[string]spec.Schema{
			"name":     str,
			"children": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: ptrTo(refTo("test.Node", ""))}}},
		}),
		"test.Leaf":     obj("Leaf type", map[string]spec.Schema{"name": str}),
		defObjectMeta:   obj("ObjectMeta", map[string]spec.Schema{"name": str}),
		defQuantity:     {Schema: spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "quantity"}}},
		defIntOrString:  {Schema: spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "int-or-string"}}},
		defRawExtension: obj("raw", nil),
		defTime:         {Schema: spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}}},
	}

	got, err := newConverter(defs).root("test.Root")
	if err != nil {
		t.Fatal(err)
	}
	intOrString := []apiextv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}
	leaf := apiextv1.JSONSchemaProps{Type: "object", Description: "Leaf type", Properties: map[string]apiextv1.JSONSchemaProps{"name": {Type: "string"}}}
	want := &apiextv1.JSONSchemaProps{
		Type: "object", Description: "root", Required: []string{"spec"},
		Properties: map[string]apiextv1.JSONSchemaProps{
			"metadata": {Type: "object"},
			"spec": {
				Type: "object", Description: "the spec",
				Properties: map[string]apiextv1.JSONSchemaProps{
					"size": {AnyOf: intOrString, Pattern: quantityPattern, XIntOrString: true},
					"port": {AnyOf: intOrString, XIntOrString: true},
					"raw":  {Type: "object", Description: "raw", XPreserveUnknownFields: ptrTo(true)},
					"when": {Type: "string", Format: "date-time", Nullable: true},
					"node": {
						Type: "object", Description: "Node type",
						Properties: map[string]apiextv1.JSONSchemaProps{
							"name": {Type: "string"},
							"children": {Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{
								Type: "object", Description: "Node type", XPreserveUnknownFields: ptrTo(true),
							}}},
						},
					},
					"wrapped": leaf,
					"count":   {Type: "integer"},
					"tags": {Type: "array", XListType: ptrTo("set"), Items: &apiextv1.JSONSchemaPropsOrArray{
						Schema: &apiextv1.JSONSchemaProps{Type: "string"},
					}},
				},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("converted schema:\n got %+v\nwant %+v", got, want)
	}
}

func TestConverterRejectsWhatCannotBeStructural(t *testing.T) {
	cases := map[string]spec.Schema{
		"no type":         {},
		"several types":   {SchemaProps: spec.SchemaProps{Type: []string{"string", "integer"}}},
		"oneOf":           {SchemaProps: spec.SchemaProps{OneOf: []spec.Schema{{}, {}}}},
		"untyped map":     {SchemaProps: spec.SchemaProps{Type: []string{"object"}, AdditionalProperties: &spec.SchemaOrBool{Allows: true}}},
		"unknown $ref":    refTo("test.Missing", ""),
		"array, no items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}}},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			defs := map[string]common.OpenAPIDefinition{"test.Root": obj("", map[string]spec.Schema{"f": s})}
			if _, err := newConverter(defs).root("test.Root"); err == nil {
				t.Error("want an error")
			}
		})
	}
}
