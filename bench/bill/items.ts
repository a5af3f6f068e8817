import type { AwsUsageRow } from '../../local/emulator/usage.js';
import { MONTH_SECONDS } from '../cost.js';
import type { LogUsage } from './log-usage.js';
import {
  IDLE_POLLERS_PER_SQS_MAPPING,
  IDLE_POLLING_SOURCE,
  LIST_PRICES,
  LONG_POLL_SECONDS,
  type OperationPrice,
  SCHEDULE_RULE_EVENTS,
} from './prices.js';
import type { TemplateFacts } from './template-facts.js';
import type { BillInput, BillItem } from './types.js';

/** The bill's items: of the counted calls, of the functions' duration and logs, of the template. */

const GB = 1024 ** 3;

/** Who made a call, as the bill names it. */
export function roleOf(caller: string, workerName: string, scheduled: Set<string>): string {
  if (caller === 'runtime') return 'event source mappings (Lambda’s pollers)';
  if (caller === 'harness') return 'producer';
  const name = caller.startsWith('function:') ? caller.slice('function:'.length) : caller;
  if (name === workerName) return 'worker';
  return scheduled.has(name) ? `scheduled ${name}` : name;
}

/** USD of one counted row at list prices (0 for a free or unpriced one). */
export function rowUsd(row: AwsUsageRow, price: OperationPrice | undefined): number {
  if (!price || price.kind === 'free') return 0;
  if (price.kind === 'per-request') return row.billed_requests * price.price.usd;
  return (
    (row.write_units + row.index_write_units) * LIST_PRICES.dynamodbWriteUnit.usd +
    row.read_units * LIST_PRICES.dynamodbReadUnit.usd
  );
}

const SERVICE_LABEL: Record<string, string> = {
  sqs: 'SQS requests',
  secretsmanager: 'Secrets Manager API calls',
  lambda: 'Lambda API',
  dynamodbstreams: 'DynamoDB Streams reads',
};

/** Per-solve (variable) or per-invocation (scheduled) items of the counted calls, grouped by role and service. */
export function callItems(
  billable: { row: AwsUsageRow; price: OperationPrice }[],
  i: BillInput,
  scheduled: Set<string>,
  per: (role: string) => number,
): { variable: BillItem[]; perInvocation: Map<string, BillItem[]> } {
  const groups = new Map<
    string,
    { role: string; service: string; rows: { row: AwsUsageRow; price: OperationPrice }[] }
  >();
  for (const b of billable) {
    // The runtime's bookkeeping is free and no charge of the account: counted, not itemized.
    if (b.row.caller === 'runtime' && b.row.service !== 'sqs' && b.row.service !== 'dynamodbstreams')
      continue;
    const role = roleOf(b.row.caller, i.workerName, scheduled);
    const service = b.row.service === 'dynamodb' ? `dynamodb:${b.price.kind}` : b.row.service;
    const key = `${role}\u0000${service}`;
    const g = groups.get(key) ?? { role, service: b.row.service, rows: [] };
    g.rows.push(b);
    groups.set(key, g);
  }
  const variable: BillItem[] = [];
  const perInvocation = new Map<string, BillItem[]>();
  for (const g of groups.values()) {
    const k = per(g.role);
    const sum = (f: (r: AwsUsageRow) => number) => g.rows.reduce((a, b) => a + f(b.row), 0) * k;
    const items: BillItem[] = [];
    if (g.service === 'dynamodb') {
      const ops = [...new Set(g.rows.map((b) => b.row.operation))].join(', ');
      items.push(
        {
          item: `DynamoDB writes, table — ${g.role} (${ops})`,
          quantity: sum((r) => r.write_units),
          unit: 'write request units',
          usd: sum((r) => r.write_units) * LIST_PRICES.dynamodbWriteUnit.usd,
          price: LIST_PRICES.dynamodbWriteUnit,
        },
        {
          item: `DynamoDB writes, secondary indexes — ${g.role}`,
          quantity: sum((r) => r.index_write_units),
          unit: 'write request units',
          usd: sum((r) => r.index_write_units) * LIST_PRICES.dynamodbWriteUnit.usd,
          price: LIST_PRICES.dynamodbWriteUnit,
        },
        {
          item: `DynamoDB reads — ${g.role}`,
          quantity: sum((r) => r.read_units),
          unit: 'read request units',
          usd: sum((r) => r.read_units) * LIST_PRICES.dynamodbReadUnit.usd,
          price: LIST_PRICES.dynamodbReadUnit,
        },
      );
    } else {
      const first = g.rows[0]?.price as OperationPrice;
      const ops = [...new Set(g.rows.map((b) => b.row.operation))].join(', ');
      items.push({
        item: `${SERVICE_LABEL[g.service] ?? g.service} — ${g.role} (${ops})`,
        quantity: sum((r) => r.billed_requests),
        unit: 'requests',
        usd: g.rows.reduce((a, b) => a + rowUsd(b.row, b.price), 0) * k,
        price: first.kind === 'per-request' ? first.price : null,
        ...(first.kind === 'free' ? { free: first.why } : {}),
      });
    }
    if (g.role.endsWith('outcome-publisher')) for (const it of items) it.moved_by = 'outcomeStream';
    if (g.role.startsWith('scheduled '))
      perInvocation.set(g.role, [...(perInvocation.get(g.role) ?? []), ...items]);
    else variable.push(...items);
  }
  return { variable, perInvocation };
}

export function logItems(
  name: string,
  log: LogUsage,
  k: number,
  retentionDays: number | null,
  movedBy?: string,
): BillItem[] {
  const gb = (log.bytes * k) / GB;
  const info = log.bytesByKind.INFO ?? 0;
  const items: BillItem[] = [
    {
      item: `CloudWatch Logs ingestion — ${name} (${log.bytes ? Math.round((100 * info) / log.bytes) : 0} % of it INFO lines)`,
      quantity: gb,
      unit: 'GB',
      usd: gb * LIST_PRICES.logsIngestedGb.usd,
      price: LIST_PRICES.logsIngestedGb,
      moved_by: movedBy ?? 'log level (POWERTOOLS_LOG_LEVEL)',
    },
  ];
  if (retentionDays) {
    // A month's ingestion kept for `retentionDays`: in steady state that many days of logs are stored.
    const stored = gb * (retentionDays / 30);
    items.push({
      item: `CloudWatch Logs storage — ${name} (${retentionDays}-day retention, steady state, uncompressed: an upper bound)`,
      quantity: stored,
      unit: 'GB-month',
      usd: stored * LIST_PRICES.logsStoredGbMonth.usd,
      price: LIST_PRICES.logsStoredGbMonth,
      moved_by: 'logRetentionDays',
    });
  }
  return items;
}

export function lambdaItems(name: string, gbSeconds: number, requests: number, movedBy: string): BillItem[] {
  return [
    {
      item: `Lambda duration — ${name}`,
      quantity: gbSeconds,
      unit: 'GB-s',
      usd: gbSeconds * LIST_PRICES.lambdaArmGbSecond.usd,
      price: LIST_PRICES.lambdaArmGbSecond,
      moved_by: movedBy,
    },
    {
      item: `Lambda requests — ${name}`,
      quantity: requests,
      unit: 'invocations',
      usd: requests * LIST_PRICES.lambdaRequest.usd,
      price: LIST_PRICES.lambdaRequest,
    },
  ];
}

/** Fixed monthly items of the template: alarms, dashboards, secrets, idle polling, schedule events, custom metrics. */
export function templateItems(t: TemplateFacts, identities: number): BillItem[] {
  const standard = t.alarms.filter((a) => !a.highResolution).reduce((a, b) => a + b.metrics, 0);
  const high = t.alarms.filter((a) => a.highResolution).reduce((a, b) => a + b.metrics, 0);
  const idlePolls = t.sqsMappings * IDLE_POLLERS_PER_SQS_MAPPING * (MONTH_SECONDS / LONG_POLL_SECONDS);
  const items: BillItem[] = [
    {
      item: `CloudWatch alarms (${t.alarms.length} alarms, ${standard} standard-resolution metrics)`,
      quantity: standard,
      unit: 'alarm metrics',
      usd: standard * LIST_PRICES.alarmMetricMonth.usd,
      price: LIST_PRICES.alarmMetricMonth,
      moved_by: 'outcomeStream (3 of the alarms watch the outcome stream)',
    },
    {
      item: `CloudWatch dashboards (${t.dashboards})`,
      quantity: t.dashboards,
      unit: 'dashboards',
      usd: t.dashboards * LIST_PRICES.dashboardMonth.usd,
      price: LIST_PRICES.dashboardMonth,
      moved_by: 'the dashboard (free when the account has at most three)',
    },
    {
      item: `Secrets Manager secrets (${t.secrets.join(', ')})`,
      quantity: t.secrets.length,
      unit: 'secrets',
      usd: t.secrets.length * LIST_PRICES.secretMonth.usd,
      price: LIST_PRICES.secretMonth,
    },
    {
      item: `CloudWatch custom metrics (${identities} name + dimension sets the functions' EMF lines created in the run)`,
      quantity: identities,
      unit: 'metrics',
      usd: identities * LIST_PRICES.customMetricMonth.usd,
      price: LIST_PRICES.customMetricMonth,
    },
    {
      item: `SQS long polls of an idle queue (${t.sqsMappings} SQS event source mapping × ${IDLE_POLLERS_PER_SQS_MAPPING} pollers × one ${LONG_POLL_SECONDS} s poll; estimate: ${IDLE_POLLING_SOURCE})`,
      quantity: idlePolls,
      unit: 'requests',
      usd: idlePolls * LIST_PRICES.sqsRequest.usd,
      price: LIST_PRICES.sqsRequest,
    },
  ];
  if (high) {
    items.push({
      item: 'CloudWatch high-resolution alarm metrics',
      quantity: high,
      unit: 'alarm metrics',
      usd: high * LIST_PRICES.alarmHighResolutionMetricMonth.usd,
      price: LIST_PRICES.alarmHighResolutionMetricMonth,
    });
  }
  for (const s of t.schedules) {
    items.push({
      item: `EventBridge schedule events — ${s.functionName} (every ${s.periodS} s)`,
      quantity: MONTH_SECONDS / s.periodS,
      unit: 'events',
      usd: 0,
      price: null,
      free: SCHEDULE_RULE_EVENTS.why,
    });
  }
  return items;
}
