/**
 * Progress for long CLI operations (enqueue, redrive), always on stderr so stdout stays data.
 * On a terminal: one redrawn line with a bar, rate and ETA. Otherwise (pipes, CI logs): a plain
 * line every few seconds and a final one, so logs stay readable. And the text chart of in flight
 * against the cap that `threadgate status --watch` redraws (renderChart).
 */

export interface ProgressStream {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressOptions {
  /** What is being counted, e.g. "enqueue". */
  label: string;
  /** Unit after the counts, e.g. "lines" or "messages". */
  unit?: string;
  /** Known total, when there is one (ETA and bar need it). */
  total?: number;
  stream?: ProgressStream;
  /** Redraw in place; defaults to whether the stream is a terminal. */
  tty?: boolean;
  /** Milliseconds clock, for tests. */
  now?: () => number;
  /** Plain mode: at most one line per this many ms (default 2000). */
  plainIntervalMs?: number;
  /** TTY mode: at most one redraw per this many ms (default 100). */
  ttyIntervalMs?: number;
}

export class Progress {
  private done = 0;
  private total: number | undefined;
  private detail: string | undefined;
  private readonly startedAt: number;
  private lastDrawAt = Number.NEGATIVE_INFINITY;
  private finished = false;
  private readonly stream: ProgressStream;
  private readonly tty: boolean;
  private readonly now: () => number;

  constructor(private readonly options: ProgressOptions) {
    this.stream = options.stream ?? process.stderr;
    this.tty = options.tty ?? this.stream.isTTY === true;
    this.now = options.now ?? (() => Date.now());
    this.total = options.total;
    this.startedAt = this.now();
    // In a log, the first line waits one interval: short runs print just the final line.
    if (!this.tty) this.lastDrawAt = this.startedAt;
  }

  setTotal(total: number | undefined): void {
    this.total = total;
  }

  /** Text shown after the counts, e.g. counts by status; undefined removes it. */
  setDetail(detail: string | undefined): void {
    this.detail = detail;
  }

  /** Count `n` more units done. */
  tick(n = 1): void {
    this.done += n;
    this.maybeDraw();
  }

  /** Set the count done so far. */
  update(done: number): void {
    this.done = done;
    this.maybeDraw();
  }

  /** Print a message without tearing the bar. */
  log(line: string): void {
    if (this.tty && !this.finished) this.stream.write('\r\x1b[2K');
    this.stream.write(`${line}\n`);
    if (this.tty && !this.finished) this.draw();
  }

  /** Final line; the bar stops redrawing. */
  finish(): void {
    if (this.finished) return;
    this.draw(true);
    this.finished = true;
  }

  private maybeDraw(): void {
    if (this.finished) return;
    const interval = this.tty ? (this.options.ttyIntervalMs ?? 100) : (this.options.plainIntervalMs ?? 2000);
    if (this.now() - this.lastDrawAt >= interval) this.draw();
  }

  private draw(final = false): void {
    this.lastDrawAt = this.now();
    const snapshot: ProgressSnapshot = {
      label: this.options.label,
      unit: this.options.unit ?? '',
      done: this.done,
      total: this.total,
      elapsedMs: this.lastDrawAt - this.startedAt,
      ...(this.detail ? { detail: this.detail } : {}),
    };
    if (this.tty) {
      const width = this.stream.columns ?? 80;
      this.stream.write(`\r\x1b[2K${renderBarLine(snapshot, width, final)}${final ? '\n' : ''}`);
    } else {
      this.stream.write(`${renderPlainLine(snapshot, final)}\n`);
    }
  }
}

export interface ProgressSnapshot {
  label: string;
  unit: string;
  done: number;
  total: number | undefined;
  elapsedMs: number;
  /** Shown after the counts (e.g. `submitted 40, failed 2`). */
  detail?: string;
}

/**
 * Below this much elapsed time no rate is shown: a few messages moved in 5 ms are not
 * "20000/s", and the ETA from such a rate is noise too.
 */
export const MIN_RATE_ELAPSED_MS = 1000;

/** Units per second over the whole run (0 until MIN_RATE_ELAPSED_MS has passed). */
export function rateOf(s: ProgressSnapshot): number {
  return s.elapsedMs >= MIN_RATE_ELAPSED_MS ? (s.done * 1000) / s.elapsedMs : 0;
}

/** ` 12.5/s`, or nothing while the run is too short for a meaningful rate. */
function rateText(s: ProgressSnapshot): string {
  return s.elapsedMs >= MIN_RATE_ELAPSED_MS ? ` ${formatRate(rateOf(s))}/s` : '';
}

/** Milliseconds left at the current rate, when a total is known and there is a rate. */
export function etaMs(s: ProgressSnapshot): number | undefined {
  const rate = rateOf(s);
  if (s.total === undefined || rate <= 0) return undefined;
  return (Math.max(0, s.total - s.done) / rate) * 1000;
}

/** `1:05`, `12:00`, `1:02:03`. */
export function formatDuration(ms: number): string {
  const totalSeconds = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const s = totalSeconds % 60;
  const ss = String(s).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

function formatRate(rate: number): string {
  return rate >= 100 ? rate.toFixed(0) : rate.toFixed(1);
}

function counts(s: ProgressSnapshot): string {
  const unit = s.unit ? ` ${s.unit}` : '';
  return s.total === undefined ? `${s.done}${unit}` : `${s.done}/${s.total}${unit}`;
}

export function renderPlainLine(s: ProgressSnapshot, final = false): string {
  const parts = [`${s.label}: ${counts(s)}`];
  if (s.total !== undefined && s.total > 0) parts.push(`${Math.floor((100 * s.done) / s.total)}%`);
  if (s.detail) parts.push(`(${s.detail})`);
  const rate = rateText(s);
  if (rate) parts.push(rate.trim());
  if (final) parts.push(`in ${formatDuration(s.elapsedMs)}`);
  else {
    const eta = etaMs(s);
    if (eta !== undefined) parts.push(`ETA ${formatDuration(eta)}`);
  }
  return parts.join(' ');
}

export function renderBarLine(s: ProgressSnapshot, columns: number, final = false): string {
  const eta = etaMs(s);
  const when = final
    ? ` in ${formatDuration(s.elapsedMs)}`
    : eta === undefined
      ? ''
      : ` ETA ${formatDuration(eta)}`;
  const tail = ` ${counts(s)}${s.detail ? ` (${s.detail})` : ''}${rateText(s)}${when}`;
  if (s.total === undefined || s.total <= 0) return `${s.label}:${tail}`;
  const fraction = Math.min(1, s.done / s.total);
  const pct = `${String(Math.floor(fraction * 100)).padStart(3)}%`;
  const barWidth = Math.max(10, Math.min(40, columns - s.label.length - tail.length - pct.length - 6));
  const filled = Math.round(fraction * barWidth);
  return `${s.label} [${'#'.repeat(filled)}${'-'.repeat(barWidth - filled)}] ${pct}${tail}`;
}

export interface ChartSample {
  /** Epoch ms. */
  at: number;
  inFlight: number;
  cap: number | null;
}

/**
 * A small text chart of in flight (bars) against the cap (a line) over the last `windowMs`.
 * Each column is one time slice; a slice shows the highest in-flight count seen in it.
 */
export function renderChart(
  samples: ChartSample[],
  o: { now: number; windowMs: number; width?: number; height?: number },
): string {
  const width = Math.max(10, o.width ?? 60);
  const height = Math.max(3, o.height ?? 8);
  const start = o.now - o.windowMs;
  const slice = o.windowMs / width;
  const inFlight: (number | undefined)[] = new Array(width).fill(undefined);
  const caps: (number | undefined)[] = new Array(width).fill(undefined);
  for (const s of samples) {
    if (s.at < start || s.at > o.now) continue;
    const col = Math.min(width - 1, Math.floor((s.at - start) / slice));
    inFlight[col] = Math.max(inFlight[col] ?? 0, s.inFlight);
    if (s.cap !== null) caps[col] = s.cap;
  }
  // Carry the cap forward across empty slices so the line is continuous.
  let lastCap: number | undefined;
  for (let c = 0; c < width; c++) {
    if (caps[c] !== undefined) lastCap = caps[c];
    else if (lastCap !== undefined && inFlight.slice(0, c).some((v) => v !== undefined)) caps[c] = lastCap;
  }
  const top = Math.max(1, ...inFlight.map((v) => v ?? 0), ...caps.map((v) => v ?? 0));
  const rowOf = (value: number) => Math.round((value / top) * height);
  const labelWidth = String(top).length;
  const rows: string[] = [];
  for (let row = height; row >= 1; row--) {
    let line = '';
    for (let c = 0; c < width; c++) {
      const v = inFlight[c];
      const cap = caps[c];
      if (v !== undefined && rowOf(v) >= row)
        line += cap !== undefined && v > cap && rowOf(cap) < row ? '!' : '█';
      else if (cap !== undefined && rowOf(cap) === row) line += '─';
      else line += ' ';
    }
    const half = Math.round(top / 2);
    const label =
      row === height ? String(top) : row === rowOf(half) && half > 0 && half < top ? String(half) : '';
    rows.push(`${label.padStart(labelWidth)} ┤${line}`);
  }
  rows.push(`${'0'.padStart(labelWidth)} ┼${'─'.repeat(width)}`);
  const minutes = Math.round(o.windowMs / 60_000);
  rows.unshift(`in flight vs cap, last ${minutes} min (█ in flight, ─ cap, ! above cap)`);
  return `${rows.join('\n')}\n`;
}
