/**
 * What a function's log costs: the bytes it sends to CloudWatch Logs (by kind of line) and the
 * custom metrics its EMF lines create, read from the local runtime's function log
 * (`<ISO time> <environment id> <text>` per line, bench/worker-log.ts).
 */

export interface LogUsage {
  lines: number;
  /** UTF-8 bytes of each line's text (the event's message, as CloudWatch Logs ingests it). */
  bytes: number;
  /** Bytes by kind: a Powertools level (`INFO`, `WARN`, …), `metrics` (EMF), `platform` (START/END/REPORT), `other`. */
  bytesByKind: Record<string, number>;
  /** Custom metric identities: `namespace|name|dimension=value,…` (one metric per distinct dimension values). */
  metricIdentities: string[];
}

const PREFIX = /^\S+ \S+ (.*)$/;
const PLATFORM = /^(START|END|REPORT|INIT_START|ERROR) /;

interface EmfDirective {
  Namespace?: unknown;
  Dimensions?: unknown;
  Metrics?: unknown;
}

/** The metric identities one EMF line creates. */
export function emfIdentities(json: Record<string, unknown>): string[] {
  const aws = json._aws as { CloudWatchMetrics?: EmfDirective[] } | undefined;
  const out: string[] = [];
  for (const directive of aws?.CloudWatchMetrics ?? []) {
    const sets = Array.isArray(directive.Dimensions) ? (directive.Dimensions as unknown[]) : [[]];
    const metrics = Array.isArray(directive.Metrics) ? (directive.Metrics as { Name?: unknown }[]) : [];
    for (const set of sets) {
      const names = (Array.isArray(set) ? set : []).map(String).sort();
      const dims = names.map((n) => `${n}=${String(json[n])}`).join(',');
      for (const m of metrics) out.push(`${String(directive.Namespace)}|${String(m.Name)}|${dims}`);
    }
  }
  return out;
}

function kindOf(text: string): { kind: string; json?: Record<string, unknown> } {
  if (PLATFORM.test(text)) return { kind: 'platform' };
  if (!text.startsWith('{')) return { kind: 'other' };
  try {
    const json = JSON.parse(text) as Record<string, unknown>;
    if (json._aws) return { kind: 'metrics', json };
    return { kind: typeof json.level === 'string' ? json.level.toUpperCase() : 'other' };
  } catch {
    return { kind: 'other' };
  }
}

/** The log's bytes by kind and its metric identities. */
export function logUsage(text: string): LogUsage {
  const usage: LogUsage = { lines: 0, bytes: 0, bytesByKind: {}, metricIdentities: [] };
  const identities = new Set<string>();
  for (const line of text.split('\n')) {
    const m = PREFIX.exec(line);
    if (!m) continue;
    const body = m[1] as string;
    const bytes = Buffer.byteLength(body, 'utf8');
    const { kind, json } = kindOf(body);
    usage.lines += 1;
    usage.bytes += bytes;
    usage.bytesByKind[kind] = (usage.bytesByKind[kind] ?? 0) + bytes;
    if (json) for (const id of emfIdentities(json)) identities.add(id);
  }
  usage.metricIdentities = [...identities].sort();
  return usage;
}
