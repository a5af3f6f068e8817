import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SQSClient } from '@aws-sdk/client-sqs';
import { awsClientOptions } from '../common/aws-clients.js';
import { type LazyClient, lazyClient } from '../common/lazy-client.js';

/**
 * The worker's AWS SDK clients, each built with awsClientOptions(). DynamoDB and SQS serve every
 * record and are made at once; Lambda (only a pause disables the mapping) and Secrets
 * Manager (one read per environment, again after a stop or a resume) are factories whose SDK
 * module is imported on first use, so an environment that never pauses never loads
 * @aws-sdk/client-lambda (docs/benchmark-notes.md "Worker memory"). Tests pass their own clients.
 */
export interface WorkerClients {
  ddb?: DynamoDBClient;
  sqs?: SQSClient;
  lambda?: LazyClient<LambdaClient>;
  secrets?: LazyClient<SecretsManagerClient>;
}

export function workerClients(given: WorkerClients = {}): Required<WorkerClients> {
  const options = awsClientOptions;
  return {
    ddb: given.ddb ?? new DynamoDBClient(options()),
    sqs: given.sqs ?? new SQSClient(options()),
    lambda:
      given.lambda ??
      lazyClient(async () => new (await import('@aws-sdk/client-lambda')).LambdaClient(options())),
    secrets:
      given.secrets ??
      lazyClient(
        async () => new (await import('@aws-sdk/client-secrets-manager')).SecretsManagerClient(options()),
      ),
  };
}
