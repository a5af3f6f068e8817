import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { describe, expect, it } from 'vitest';
import { PipelineControl, parseState, stopReason } from '../../../../functions/pipeline/control.js';
import type { PublishedShape } from '../../../../functions/pipeline/lanes.js';

describe('stopReason', () => {
  it.each([
    [
      'a message that already names the answer',
      ['ERROR_WRONG_USER_KEY', 'CaptchaAI answered ERROR_WRONG_USER_KEY: the key is wrong'],
      'CaptchaAI answered ERROR_WRONG_USER_KEY: the key is wrong',
    ],
    [
      'the call that got the answer',
      ['ERROR_KEY_DOES_NOT_EXIST', 'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST: no such key', 'threadsinfo'],
      'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST to threadsinfo: no such key',
    ],
    [
      'a message that continues the sentence',
      ['ERROR_ZERO_BALANCE', 'CaptchaAI answered ERROR_ZERO_BALANCE and 0 of 5 threads work: no active plan'],
      'CaptchaAI answered ERROR_ZERO_BALANCE and 0 of 5 threads work: no active plan',
    ],
    [
      'a bare message',
      ['IP_BANNED', 'banned for 5 minutes'],
      'CaptchaAI answered IP_BANNED: banned for 5 minutes',
    ],
  ])('says the answer once for %s', (_, args, reason) => {
    // Act + Assess
    expect(stopReason(...(args as [string, string, string?]))).toBe(reason);
  });
});

/** Every call the control makes, in order, on fake clients that answer `item` to a GetItem. */
function controlWith(o: { item?: Record<string, { S: string }>; firstShape?: PublishedShape } = {}) {
  const calls: { command: string; input: Record<string, unknown> }[] = [];
  const client = (answer: (command: string) => unknown) => ({
    send: async (command: { constructor: { name: string }; input: Record<string, unknown> }) => {
      calls.push({ command: command.constructor.name, input: command.input });
      return answer(command.constructor.name);
    },
  });
  const control = new PipelineControl({
    lambda: client(() => ({})) as unknown as LambdaClient,
    dynamodb: client((c) =>
      c === 'GetItemCommand' ? (o.item ? { Item: { ...STATE_KEY, ...o.item } } : {}) : {},
    ) as unknown as DynamoDBClient,
    ledgerTable: 'ledger-table',
    workerFunctionName: 'tg-worker',
    queueArn: 'arn:aws:sqs:us-east-1:123456789012:jobs',
    mappingUuid: 'mapping-1',
    now: () => new Date('2026-01-02T03:04:05.000Z'),
    ...(o.firstShape ? { firstShape: o.firstShape } : {}),
  });
  return { control, calls };
}

const STATE_KEY = { pk: { S: 'pipeline' }, sk: { S: 'state' } };
const FIRST: PublishedShape = { cap: 12, r: 3, L: 4, since: 0 };
const PUBLISHED: PublishedShape = { cap: 20, r: 5, L: 4, since: 7 };

describe('PipelineControl on the state item', () => {
  it('reads the state with one strongly consistent GetItem of that attribute alone; none written is running', async () => {
    // Prepare + Act
    const empty = controlWith();
    const paused = controlWith({
      item: { state: { S: '{"paused":true,"reason":"key refused","by":"worker"}' } },
    });
    // Assess
    expect(await empty.control.readState()).toEqual({ paused: false });
    expect(await paused.control.readState()).toEqual({ paused: true, reason: 'key refused', by: 'worker' });
    expect(paused.calls).toEqual([
      {
        command: 'GetItemCommand',
        input: {
          TableName: 'ledger-table',
          Key: STATE_KEY,
          ConsistentRead: true,
          ProjectionExpression: '#state',
          ExpressionAttributeNames: { '#state': 'state' },
        },
      },
    ]);
  });

  it('reads the state and the shape in one GetItem; no shape written yet is the first shape, an unreadable one none', async () => {
    // Prepare
    const state = { S: '{"paused":false}' };
    const published = controlWith({
      item: { state, shape: { S: JSON.stringify(PUBLISHED) } },
      firstShape: FIRST,
    });
    const unpublished = controlWith({ item: { state }, firstShape: FIRST });
    const broken = controlWith({ item: { state, shape: { S: '{"cap":12}' } }, firstShape: FIRST });
    // Act + Assess
    expect(await published.control.readStateAndShape()).toEqual({
      state: { paused: false },
      shape: PUBLISHED,
    });
    expect(published.calls).toHaveLength(1);
    expect(published.calls[0]?.input).toMatchObject({
      ConsistentRead: true,
      ProjectionExpression: '#state, #shape',
      ExpressionAttributeNames: { '#state': 'state', '#shape': 'shape' },
    });
    expect((await unpublished.control.readStateAndShape()).shape).toEqual(FIRST);
    expect(await unpublished.control.readShape()).toEqual(FIRST);
    expect((await broken.control.readStateAndShape()).shape).toBeUndefined();
  });

  it('without lanes reads the state alone and no shape, whatever the item holds', async () => {
    const { control, calls } = controlWith({ item: { shape: { S: JSON.stringify(PUBLISHED) } } });
    expect(await control.readStateAndShape()).toEqual({ state: { paused: false }, shape: undefined });
    expect(await control.readShape()).toBeUndefined();
    expect(calls.map((c) => c.input.ProjectionExpression)).toEqual(['#state']);
  });

  it('pauses by disabling the mapping first, then setting the state attribute alone; resumes the other way round', async () => {
    // Prepare
    const { control, calls } = controlWith();
    const stateWrite = (paused: boolean, reason: string, by: string) => ({
      command: 'UpdateItemCommand',
      input: {
        TableName: 'ledger-table',
        Key: STATE_KEY,
        UpdateExpression: 'SET #state = :value',
        ExpressionAttributeNames: { '#state': 'state' },
        ExpressionAttributeValues: {
          ':value': {
            S: JSON.stringify({
              paused,
              reason,
              ...(paused ? { code: 'E1' } : {}),
              since: '2026-01-02T03:04:05.000Z',
              by,
            }),
          },
        },
      },
    });
    const mapping = (Enabled: boolean) => ({
      command: 'UpdateEventSourceMappingCommand',
      input: { UUID: 'mapping-1', Enabled },
    });
    // Act
    await control.pause('key refused', 'operator', 'E1');
    await control.resume('operator', 'fixed');
    // Assess: a published shape is never written over (the state attribute alone is set)
    expect(calls).toEqual([
      mapping(false),
      stateWrite(true, 'key refused', 'operator'),
      stateWrite(false, 'fixed', 'operator'),
      mapping(true),
    ]);
  });

  it('publishes the shape as the shape attribute alone, leaving the state as it is', async () => {
    const { control, calls } = controlWith({ firstShape: FIRST });
    await control.writeShape(PUBLISHED);
    expect(calls).toEqual([
      {
        command: 'UpdateItemCommand',
        input: {
          TableName: 'ledger-table',
          Key: STATE_KEY,
          UpdateExpression: 'SET #shape = :value',
          ExpressionAttributeNames: { '#shape': 'shape' },
          ExpressionAttributeValues: { ':value': { S: JSON.stringify(PUBLISHED) } },
        },
      },
    ]);
  });

  it('parses a state: paused only when it says true; a missing value is running', () => {
    expect(parseState(undefined)).toEqual({ paused: false });
    expect(parseState('{"paused":"yes","reason":"x"}')).toEqual({ paused: false, reason: 'x' });
    expect(() => parseState('not json')).toThrow();
  });
});
