package ddbtable

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestHashRange(t *testing.T) {
	in := HashRange("t", "pk", "sk")
	if *in.TableName != "t" || in.BillingMode != types.BillingModePayPerRequest || len(in.KeySchema) != 2 || len(in.AttributeDefinitions) != 2 {
		t.Fatalf("%+v", in)
	}
	if *in.KeySchema[0].AttributeName != "pk" || in.KeySchema[0].KeyType != types.KeyTypeHash ||
		*in.KeySchema[1].AttributeName != "sk" || in.KeySchema[1].KeyType != types.KeyTypeRange {
		t.Errorf("key schema %+v", in.KeySchema)
	}
	for _, a := range in.AttributeDefinitions {
		if a.AttributeType != types.ScalarAttributeTypeS {
			t.Errorf("attribute %s is %s, want S", *a.AttributeName, a.AttributeType)
		}
	}
}
