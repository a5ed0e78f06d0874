package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// TestServices checks that the stand-ins the integration tests rely on
// speak the real protocols to the real SDK: a Kinesis stream takes and
// gives back a record, a DynamoDB table does an atomic ADD.
func TestServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := awstest.Config(t)

	t.Run("kinesalite", func(t *testing.T) {
		kc := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.KinesisEnv)) })
		name := aws.String(fmt.Sprintf("smoke-%d", time.Now().UnixNano())) // unique: the stand-ins may outlive one run
		if _, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: name, ShardCount: aws.Int32(1)}); err != nil {
			t.Fatal(err)
		}
		if err := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond }).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: name}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		put, err := kc.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: name, PartitionKey: aws.String("k"), Data: []byte("hello")})
		if err != nil {
			t.Fatal(err)
		}
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: name, ShardId: put.ShardId,
			ShardIteratorType: kintypes.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: put.SequenceNumber})
		if err != nil {
			t.Fatal(err)
		}
		got, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Records) != 1 || string(got.Records[0].Data) != "hello" {
			t.Fatalf("records %+v", got.Records)
		}
	})

	t.Run("dynalite", func(t *testing.T) {
		dc := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.DynamoDBEnv))
		})
		table := aws.String(fmt.Sprintf("smoke-%d", time.Now().UnixNano()))
		_, err := dc.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            table,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("PK"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("PK"), KeyType: ddbtypes.KeyTypeHash}},
			BillingMode:          ddbtypes.BillingModePayPerRequest,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := dynamodb.NewTableExistsWaiter(dc, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond }).Wait(ctx, &dynamodb.DescribeTableInput{TableName: table}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		var count string
		for range 3 {
			out, err := dc.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 table,
				Key:                       map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: "IP#203.0.113.7#PATH#global"}},
				UpdateExpression:          aws.String("ADD #c :one"),
				ExpressionAttributeNames:  map[string]string{"#c": "count"},
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}},
				ReturnValues:              ddbtypes.ReturnValueUpdatedNew,
			})
			if err != nil {
				t.Fatal(err)
			}
			count = out.Attributes["count"].(*ddbtypes.AttributeValueMemberN).Value
		}
		if count != "3" {
			t.Fatalf("count after three ADDs: %s", count)
		}
	})
}
