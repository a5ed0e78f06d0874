package lists

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// The DynamoDB table of lists, for edges that share their lists through
// DynamoDB: one item per entry of a list.
//
//	list     (S, hash key)   the list's name: allow, deny, challenge
//	entry    (S, range key)  an entry in the file format: an address, a
//	                         CIDR prefix or user:<id>
//	expires  (N)             Unix seconds after which the entry no longer
//	                         applies; DynamoDB's time to live deletes it
//	                         some time later, so readers compare too
//	reason   (S)             why the entry is there, for people
const (
	TableListAttribute    = "list"
	TableEntryAttribute   = "entry"
	TableExpiresAttribute = "expires"
	TableReasonAttribute  = "reason"
)

// TableSpec returns the request that creates a lists table named name,
// billed per request. Time to live is enabled separately, by
// TimeToLiveSpec, once the table is active.
func TableSpec(name string) *dynamodb.CreateTableInput {
	return ddbtable.HashRange(name, TableListAttribute, TableEntryAttribute)
}

// TimeToLiveSpec returns the request that enables time to live on the
// expires attribute of the lists table named name.
func TimeToLiveSpec(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TableExpiresAttribute),
			Enabled:       aws.Bool(true),
		},
	}
}
