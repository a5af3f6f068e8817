import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildBill } from '../../../bench/bill/bill.js';
import type { LogUsage } from '../../../bench/bill/log-usage.js';
import { emfIdentities, logUsage } from '../../../bench/bill/log-usage.js';
import { FUNCTION_OPERATIONS, LIST_PRICES } from '../../../bench/bill/prices.js';
import { templateFacts } from '../../../bench/bill/template-facts.js';
import type { AwsUsageRow } from '../../../local/emulator/usage.js';

function row(
  partial: Partial<AwsUsageRow> & Pick<AwsUsageRow, 'caller' | 'service' | 'operation'>,
): AwsUsageRow {
  return {
    resource: '',
    requests: 1,
    errors: 0,
    billed_requests: 1,
    write_units: 0,
    index_write_units: 0,
    read_units: 0,
    conditional_failures: 0,
    items_written: 0,
    ...partial,
  };
}

const noLog: LogUsage = { lines: 0, bytes: 0, bytesByKind: {}, metricIdentities: [] };

const template = templateFacts({
  Resources: {
    W: { Type: 'AWS::Lambda::Function', Properties: { FunctionName: 'tg-worker', MemorySize: 128 } },
    A: {
      Type: 'AWS::Lambda::Function',
      Properties: {
        FunctionName: 'tg-adjuster',
        MemorySize: 256,
        Environment: { Variables: { X_SECRET_NAME: 's' } },
      },
    },
    R: {
      Type: 'AWS::Events::Rule',
      Properties: {
        ScheduleExpression: 'rate(1 minute)',
        Targets: [{ Arn: { 'Fn::GetAtt': ['A', 'Arn'] } }],
      },
    },
    Q: { Type: 'AWS::SQS::Queue' },
    M: {
      Type: 'AWS::Lambda::EventSourceMapping',
      Properties: { EventSourceArn: { 'Fn::GetAtt': ['Q', 'Arn'] } },
    },
    Al: { Type: 'AWS::CloudWatch::Alarm', Properties: { Period: 60 } },
    D: { Type: 'AWS::CloudWatch::Dashboard' },
  },
});

function bill(usage: AwsUsageRow[], lanes?: { setting: number; L: number }) {
  return buildBill({
    ...(lanes ? { lanes } : {}),
    usage,
    template,
    functions: {
      'tg-worker': { invocations: 10, billedMs: 0, log: noLog },
      'tg-adjuster': { invocations: 2, billedMs: 1000, log: noLog },
    },
    workerName: 'tg-worker',
    workerGbSecondsPerSolve: 1,
    workerInvocationsPerSolve: 1,
    solved: 10,
    meanSolveS: 30,
  });
}

describe('buildBill', () => {
  it('prices the counted DynamoDB units per 1,000 solves, table and indexes apart', () => {
    const b = bill([
      row({
        caller: 'function:tg-worker-PT-x',
        service: 'dynamodb',
        operation: 'UpdateItem',
        write_units: 40,
        index_write_units: 60,
      }),
      row({ caller: 'function:tg-worker', service: 'dynamodb', operation: 'Query', read_units: 5 }),
    ]);
    const dynamo = b.variable_per_1000_solves.items.filter((it) => it.item.startsWith('DynamoDB'));
    expect(dynamo.map((it) => it.quantity)).toEqual([4000, 6000, 500]);
    const usd = dynamo.reduce((a, it) => a + it.usd, 0);
    expect(usd).toBeCloseTo(
      10_000 * LIST_PRICES.dynamodbWriteUnit.usd + 500 * LIST_PRICES.dynamodbReadUnit.usd,
      9,
    );
  });

  it('lists a function call that no price covers as unpriced, and a free one with its reason', () => {
    const b = bill([
      row({ caller: 'function:tg-worker', service: 'dynamodb', operation: 'DescribeTable' }),
      row({ caller: 'function:tg-worker', service: 'lambda', operation: 'UpdateEventSourceMapping' }),
    ]);
    expect(b.unpriced).toEqual([
      { caller: 'function:tg-worker', service: 'dynamodb', operation: 'DescribeTable', requests: 1 },
    ]);
    expect(b.counted.find((c) => c.service === 'lambda')?.why).toMatch(/management API/);
  });

  it('leaves the bench’s own calls out and keeps the producer’s sends in', () => {
    const b = bill([
      row({ caller: 'harness', service: 'sqs', operation: 'SendMessageBatch', billed_requests: 3 }),
      row({ caller: 'harness', service: 'dynamodb', operation: 'Scan' }),
    ]);
    expect(b.excluded.map((e) => e.operation)).toEqual(['Scan']);
    expect(b.variable_per_1000_solves.items.find((it) => it.item.includes('producer'))?.quantity).toBe(300);
  });

  it('makes a scheduled function a fixed monthly charge from its measured invocations', () => {
    const b = bill([
      row({
        caller: 'function:tg-adjuster',
        service: 'secretsmanager',
        operation: 'GetSecretValue',
        billed_requests: 2,
      }),
    ]);
    const items = b.fixed_per_month.items;
    expect(items.find((it) => it.item.startsWith('Lambda requests — tg-adjuster'))?.quantity).toBe(43_200);
    // 0.5 s per invocation at 256 MB, 43,200 times a month.
    expect(items.find((it) => it.item.startsWith('Lambda duration — tg-adjuster'))?.quantity).toBeCloseTo(
      5400,
      6,
    );
    expect(items.find((it) => it.item.startsWith('Secrets Manager API calls'))?.quantity).toBe(43_200);
    expect(items.find((it) => it.item.startsWith('Secrets Manager secrets'))?.usd).toBe(0.4);
    expect(b.variable_per_1000_solves.items.some((it) => it.item.includes('tg-adjuster'))).toBe(false);
  });

  it('gives the month at 20, 100 and 1,000 threads, full and 10 % use', () => {
    const b = bill([]);
    const full20 = b.monthly.find((m) => m.threads === 20 && m.use === 1);
    expect(full20?.solves_per_month).toBe(1_728_000); // 20 × 2,592,000 s ÷ 30 s
    expect(b.monthly).toHaveLength(6);
  });

  it("with lanes, gives each plan size its own r × L and quota, and shares the worker's duration among that plan's L lanes", () => {
    // Prepare: the run had lanes 8 at L 5 (a 20-thread cap); its worker duration per solve is 1 GB-s.
    const one = bill([], { setting: 1, L: 1 });
    const eight = bill([], { setting: 8, L: 5 });
    const row = (b: typeof one, threads: number) =>
      b.monthly.find((m) => m.threads === threads && m.use === 1);
    const durationPer1000 = one.variable_per_1000_solves.items.find((it) =>
      it.item.startsWith('Lambda duration — worker'),
    )?.usd;

    // Assess: the shapes and quotas of laneShape; one lane: r = threads, quota threads + 100.
    expect(row(one, 1000)).toMatchObject({ lanes: 1, r: 1000, L: 1, lambda_quota_needed: 1100 });
    expect(row(eight, 20)).toMatchObject({ lanes: 8, r: 4, L: 5, lambda_quota_needed: 104 });
    expect(row(eight, 100)).toMatchObject({ r: 14, L: 7, lambda_quota_needed: 114 });
    expect(row(eight, 1000)).toMatchObject({ r: 125, L: 8, lambda_quota_needed: 225 });
    // At 20 threads the run's own shape: the same variable cost; at 1,000 threads L 8 against the
    // run's 5: the worker's duration per solve × 5/8, the rest as it was.
    const solves = row(one, 1000)?.solves_per_month ?? 0;
    expect(row(eight, 20)?.variable).toBe(row(one, 20)?.variable);
    expect(row(eight, 1000)?.variable).toBeCloseTo(
      (row(one, 1000)?.variable ?? 0) - ((durationPer1000 ?? 0) * solves * (3 / 8)) / 1000,
      1,
    );
  });

  it('gives DynamoDB write units and AWS requests per solve, the scheduled adjuster and the bench left out', () => {
    const b = bill([
      row({
        caller: 'function:tg-worker',
        service: 'dynamodb',
        operation: 'UpdateItem',
        requests: 40,
        write_units: 40,
        index_write_units: 20,
      }),
      row({ caller: 'function:tg-worker', service: 'sqs', operation: 'ReceiveMessage', requests: 10 }),
      row({ caller: 'function:tg-adjuster', service: 'dynamodb', operation: 'GetItem', requests: 100 }),
      row({ caller: 'harness', service: 'sqs', operation: 'SendMessageBatch', requests: 1 }),
      row({ caller: 'harness', service: 'dynamodb', operation: 'Scan', requests: 50 }),
    ]);
    expect(b.per_solve).toMatchObject({
      dynamodb_write_units: 6,
      dynamodb_write_units_table: 4,
      dynamodb_write_units_indexes: 2,
      aws_requests: 5.1,
      worker_requests: 5,
      worker_requests_by_operation: { 'dynamodb UpdateItem': 4, 'sqs ReceiveMessage': 1 },
    });
  });
});

describe('logUsage', () => {
  it('counts bytes by kind and one metric per name and dimension values', () => {
    const emf = JSON.stringify({
      _aws: {
        CloudWatchMetrics: [
          { Namespace: 'N', Dimensions: [['service', 'status']], Metrics: [{ Name: 'Outcomes' }] },
        ],
      },
      service: 's',
      status: 'submitted',
      Outcomes: 1,
    });
    const text = [
      `2026-12-03T00:00:00.000Z e1 START RequestId: r1`,
      `2026-12-03T00:00:00.001Z e1 {"level":"INFO","message":"outcome"}`,
      `2026-12-03T00:00:00.002Z e1 ${emf}`,
      `2026-12-03T00:00:00.003Z e1 ${emf.replace('submitted', 'failed')}`,
    ].join('\n');
    const u = logUsage(text);
    expect(u.lines).toBe(4);
    expect(Object.keys(u.bytesByKind).sort()).toEqual(['INFO', 'metrics', 'platform']);
    expect(u.metricIdentities).toEqual([
      'N|Outcomes|service=s,status=failed',
      'N|Outcomes|service=s,status=submitted',
    ]);
    expect(emfIdentities({})).toEqual([]);
  });
});

describe('every AWS call the functions make has a price', () => {
  it('prices each command the functions import from an AWS SDK client (a call without one would land in bill.unpriced)', () => {
    // Prepare: every `XxxCommand` imported from @aws-sdk/client-<service> under functions/.
    const root = new URL('../../../functions/', import.meta.url);
    const services: Record<string, string> = {
      dynamodb: 'dynamodb',
      sqs: 'sqs',
      'secrets-manager': 'secretsmanager',
      lambda: 'lambda',
    };
    const used = new Set<string>();
    for (const file of readdirSync(root, { recursive: true, encoding: 'utf8' })) {
      if (!file.endsWith('.ts')) continue;
      const text = readFileSync(new URL(file, root), 'utf8');
      for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*'@aws-sdk\/client-([a-z-]+)'/g)) {
        const service = services[m[2] as string];
        for (const name of (m[1] as string).matchAll(/\b([A-Z]\w*)Command\b/g)) {
          used.add(`${service ?? m[2]} ${name[1]}`);
        }
      }
    }
    // Act
    const unpriced = [...used].filter((call) => {
      const [service, operation] = call.split(' ') as [string, string];
      return FUNCTION_OPERATIONS[service]?.[operation] === undefined;
    });
    // Assess: the walk found the calls it should (the state item's read and write among them).
    expect(used).toContain('dynamodb GetItem');
    expect(used).toContain('dynamodb UpdateItem');
    expect(unpriced).toEqual([]);
  });
});
