// Package ddbtable builds the CreateTable requests of the project's
// DynamoDB tables, which all share one shape: billed per request, keyed by
// a string partition key and a string sort key; and makes their calls
// (Calls): bounded, retried with backoff when throttled, and storing a
// value larger than one item in chunks (PutChunks).
package ddbtable

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// HashRange returns the request that creates the table name, billed per
// request, whose key is the string attribute hash (partition key) and the
// string attribute sortKey (sort key).
func HashRange(name, hash, sortKey string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(hash), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(sortKey), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sortKey), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
}
