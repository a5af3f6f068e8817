import { randomUUID } from 'node:crypto';
import type { Rule, Target } from '@aws-sdk/client-eventbridge';
import type { FunctionHost } from './function-host.js';
import type { RuntimeContext } from './types.js';

/** Parses `rate(5 minutes)` into ms; `cron(...)` and anything else gives undefined. */
export function ratePeriodMs(expression: string | undefined): number | undefined {
  const match = /^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$/.exec(expression?.trim() ?? '');
  if (!match) return undefined;
  const unit = match[2]!.startsWith('minute')
    ? 60_000
    : match[2]!.startsWith('hour')
      ? 3_600_000
      : 86_400_000;
  return Number(match[1]) * unit;
}

/** EventBridge's scheduler for one rule with Lambda targets. */
export class RuleTimer {
  fired = 0;
  skipped = 0;
  private readonly running = new Set<string>();
  periodMs: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private targets: Target[] = [];
  private enabled = false;
  private warned = false;

  constructor(
    private readonly runtime: RuntimeContext,
    /** The host of a target's function, if the runtime runs it. */
    private readonly hostFor: (functionName: string) => FunctionHost | undefined,
    readonly name: string,
    readonly arn: string,
    public schedule: string,
  ) {}

  update(rule: Rule, targets: Target[]): void {
    this.targets = targets;
    const enabled = rule.State === 'ENABLED';
    const period = ratePeriodMs(rule.ScheduleExpression);
    if (period === undefined && !this.warned) {
      this.warned = true;
      this.runtime.runtimeLog.line(
        `rule ${this.name}: schedule ${rule.ScheduleExpression} is not supported locally`,
      );
    }
    const floor = this.runtime.options.minRulePeriodMs ?? 50;
    const scaled = period === undefined ? undefined : Math.max(floor, period * this.runtime.timeScale);
    if (scaled === this.periodMs && enabled === this.enabled) return;
    this.schedule = rule.ScheduleExpression ?? '';
    this.periodMs = scaled;
    this.enabled = enabled;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (enabled && scaled !== undefined) {
      this.timer = setInterval(() => void this.fire(), scaled);
      this.runtime.runtimeLog.line(`rule ${this.name}: ${this.schedule} fires every ${scaled} ms`);
    }
  }

  private async fire(): Promise<void> {
    this.fired++;
    const now = new Date();
    for (const target of this.targets) {
      const functionName = target.Arn?.split(':')[6];
      const host = functionName ? this.hostFor(functionName) : undefined;
      if (!host?.fn) continue;
      if (!host.hasCapacity()) {
        host.throttled();
        continue;
      }
      const event = target.Input
        ? JSON.parse(target.Input)
        : {
            version: '0',
            id: randomUUID(),
            'detail-type': 'Scheduled Event',
            source: 'aws.events',
            account: this.arn.split(':')[4] ?? '',
            time: `${now.toISOString().slice(0, 19)}Z`,
            region: this.runtime.region,
            resources: [this.arn],
            detail: {},
          };
      // A tick that finds this rule's previous invocation still running is skipped. EventBridge
      // would overlap them, but at a scaled rate (0.6 s for a one-minute rule) a slow cold
      // start on a small machine would otherwise pile up environments faster than they finish.
      if (this.running.has(host.name)) {
        this.skipped++;
        continue;
      }
      this.running.add(host.name);
      this.runtime.emit({ type: 'rule', ruleName: this.name, functionName: host.name });
      void host
        .invoke(event)
        .catch(() => undefined)
        .finally(() => this.running.delete(host.name));
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
