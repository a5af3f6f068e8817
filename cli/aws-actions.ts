/**
 * Names the IAM action behind each AWS call the CLI makes, so that an AccessDenied can say which
 * action was refused: SQS's and Lambda's answers do not say it, and "grantOperate covers every
 * command" is only useful with the action in hand. A middleware on each client notes the action
 * on the error it throws; `refusedAction` reads it back.
 */

/** The IAM prefix of each SDK client (its `clientName`). */
const IAM_PREFIX: Record<string, string> = {
  CloudFormationClient: 'cloudformation',
  DynamoDBClient: 'dynamodb',
  LambdaClient: 'lambda',
  SecretsManagerClient: 'secretsmanager',
  SQSClient: 'sqs',
};

/** SDK operations whose IAM action has another name (the batch calls are authorized per entry). */
const ACTION_OF: Record<string, string> = {
  'sqs:SendMessageBatch': 'sqs:SendMessage',
  'sqs:DeleteMessageBatch': 'sqs:DeleteMessage',
  'sqs:ChangeMessageVisibilityBatch': 'sqs:ChangeMessageVisibility',
};

const ACTION = Symbol('threadgate.awsAction');

/** The IAM action of an SDK client's operation: `SQSClient`, `SendMessageBatchCommand` → `sqs:SendMessage`. */
export function iamAction(clientName: string, commandName: string): string {
  const prefix = IAM_PREFIX[clientName] ?? clientName.replace(/Client$/, '').toLowerCase();
  const action = `${prefix}:${commandName.replace(/Command$/, '')}`;
  return ACTION_OF[action] ?? action;
}

interface MiddlewareStackLike {
  add(
    middleware: (
      next: (args: unknown) => Promise<unknown>,
      context: { clientName?: string; commandName?: string },
    ) => (args: unknown) => Promise<unknown>,
    options: { step: 'initialize'; name: string },
  ): void;
}

/** Notes the IAM action on every error `client` throws (a DynamoDBDocumentClient shares its client's stack). */
export function noteActions<C extends { middlewareStack: unknown }>(client: C): C {
  (client.middlewareStack as MiddlewareStackLike).add(
    (next, context) => async (args) => {
      try {
        return await next(args);
      } catch (err) {
        if (err && typeof err === 'object' && context.clientName && context.commandName) {
          Object.defineProperty(err, ACTION, {
            value: iamAction(context.clientName, context.commandName),
            configurable: true,
          });
        }
        throw err;
      }
    },
    { step: 'initialize', name: 'threadgateNoteAction' },
  );
  return client;
}

/** The IAM action of the call that threw `err`, if a noted client made it. */
export function refusedAction(err: unknown): string | undefined {
  return err && typeof err === 'object' ? (err as { [ACTION]?: string })[ACTION] : undefined;
}

/** Whether `name` is one of the names AWS services give an authorization refusal. */
export function isAccessDenied(name: string): boolean {
  return /^(AccessDenied(Exception)?|AuthorizationError(Exception)?|UnauthorizedOperation|AccessDeniedError)$/.test(
    name,
  );
}
