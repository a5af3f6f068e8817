/**
 * What the synthesized CloudFormation template says about fixed monthly charges: alarms and
 * the metrics each watches, dashboards, the secrets the functions read, schedules and what they
 * invoke, each function's memory and log retention, and the SQS event source mappings.
 */

import { ratePeriodMs } from '../../local/runtime/rule-timer.js';

export interface TemplateFacts {
  alarms: { id: string; metrics: number; highResolution: boolean }[];
  dashboards: number;
  /** Distinct secret names in the functions' environments (`…_SECRET_NAME`) plus secrets the stack creates. */
  secrets: string[];
  /** Scheduled invocations: the function name and the schedule's period in seconds. */
  schedules: { functionName: string; periodS: number }[];
  functions: { name: string; memoryMb: number; logRetentionDays: number | null }[];
  /** Event source mappings whose source is an SQS queue of the stack. */
  sqsMappings: number;
}

type Resource = { Type: string; Properties?: Record<string, unknown> };

function refOf(value: unknown): string | undefined {
  const v = value as { Ref?: string; 'Fn::GetAtt'?: [string, string] } | undefined;
  return v?.Ref ?? v?.['Fn::GetAtt']?.[0];
}

export function templateFacts(template: { Resources?: Record<string, Resource> }): TemplateFacts {
  const resources = template.Resources ?? {};
  const of = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);
  const functionNameOf = (id: string | undefined) => {
    const name = id ? resources[id]?.Properties?.FunctionName : undefined;
    return typeof name === 'string' ? name : (id ?? '');
  };
  const retentionOf = (logGroup: unknown) => {
    const id = refOf((logGroup as { LogGroup?: unknown } | undefined)?.LogGroup);
    const days = id ? resources[id]?.Properties?.RetentionInDays : undefined;
    return typeof days === 'number' ? days : null;
  };
  const secrets = new Set<string>(of('AWS::SecretsManager::Secret').map(([id]) => id));
  const functions = of('AWS::Lambda::Function').map(([id, r]) => {
    const p = r.Properties ?? {};
    const vars = ((p.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables ??
      {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(vars))
      if (k.endsWith('_SECRET_NAME') && typeof v === 'string') secrets.add(v);
    return {
      name: functionNameOf(id),
      memoryMb: typeof p.MemorySize === 'number' ? p.MemorySize : 128,
      logRetentionDays: retentionOf(p.LoggingConfig),
    };
  });
  return {
    alarms: of('AWS::CloudWatch::Alarm').map(([id, r]) => {
      const p = r.Properties ?? {};
      const metrics = Array.isArray(p.Metrics)
        ? (p.Metrics as { MetricStat?: unknown }[]).filter((m) => m.MetricStat).length
        : 1;
      return { id, metrics, highResolution: typeof p.Period === 'number' && p.Period < 60 };
    }),
    dashboards: of('AWS::CloudWatch::Dashboard').length,
    secrets: [...secrets].sort(),
    schedules: of('AWS::Events::Rule').flatMap(([, r]) => {
      const periodMs = ratePeriodMs(String(r.Properties?.ScheduleExpression ?? ''));
      if (periodMs === undefined || r.Properties?.State === 'DISABLED') return [];
      const periodS = periodMs / 1000;
      const targets = (r.Properties?.Targets as { Arn?: unknown }[] | undefined) ?? [];
      return targets.map((t) => ({ functionName: functionNameOf(refOf(t.Arn)), periodS }));
    }),
    functions,
    sqsMappings: of('AWS::Lambda::EventSourceMapping').filter(
      ([, r]) => resources[refOf(r.Properties?.EventSourceArn) ?? '']?.Type === 'AWS::SQS::Queue',
    ).length,
  };
}
