import { describe, expect, it } from 'vitest';
import { formatDuration, Progress, renderBarLine, renderPlainLine } from '../../../cli/progress.js';

function fakeStream(isTTY: boolean) {
  const chunks: string[] = [];
  return { chunks, stream: { isTTY, columns: 100, write: (c: string) => chunks.push(c) } };
}

describe('Progress on a terminal', () => {
  it('redraws one line with a bar, percentage, rate and ETA', () => {
    // Prepare: 250 of 1,000 lines after 5 s.
    let now = 0;
    const { chunks, stream } = fakeStream(true);
    const progress = new Progress({ label: 'enqueue', unit: 'lines', total: 1000, stream, now: () => now });

    // Act
    now = 5_000;
    progress.update(250);

    // Assess
    const last = chunks.at(-1) ?? '';
    expect(last.startsWith('\r\x1b[2K')).toBe(true);
    expect(last).toContain('enqueue [');
    expect(last).toContain(' 25% 250/1000 lines 50.0/s ETA 0:15');
    expect(last.endsWith('\n')).toBe(false);
  });

  it('keeps log lines above the bar and ends with a newline on finish', () => {
    // Prepare
    let now = 0;
    const { chunks, stream } = fakeStream(true);
    const progress = new Progress({ label: 'redrive', total: 4, stream, now: () => now });

    // Act
    now = 1_000;
    progress.tick(2);
    progress.log('line 7: rejected: message: not valid JSON');
    now = 2_000;
    progress.tick(2);
    progress.finish();

    // Assess
    expect(chunks).toContain('line 7: rejected: message: not valid JSON\n');
    expect(chunks.at(-1)).toMatch(/100% 4\/4 2\.0\/s in 0:02\n$/);
  });
});

describe('Progress in a pipe or log', () => {
  it('prints plain lines at most every interval, then a final line', () => {
    // Prepare
    let now = 0;
    const { chunks, stream } = fakeStream(false);
    const progress = new Progress({
      label: 'enqueue',
      unit: 'lines',
      total: 100,
      stream,
      now: () => now,
      plainIntervalMs: 2_000,
    });

    // Act: ticks every 100 ms for 5 s.
    for (let i = 1; i <= 50; i++) {
      now = i * 100;
      progress.tick(2);
    }
    progress.finish();

    // Assess
    expect(chunks.every((c) => !c.includes('\r') && c.endsWith('\n'))).toBe(true);
    expect(chunks.length).toBeLessThanOrEqual(4);
    expect(chunks.at(-1)).toBe('enqueue: 100/100 lines 100% 20.0/s in 0:05\n');
  });
});

describe('progress formatting', () => {
  it.each([
    [0, '0:00'],
    [59_400, '0:59'],
    [65_000, '1:05'],
    [3_723_000, '1:02:03'],
  ])('formats %i ms as %s', (ms, text) => {
    // Act + Assess
    expect(formatDuration(ms)).toBe(text);
  });

  it('leaves out the bar and ETA when the total is unknown (standard input)', () => {
    // Act
    const bar = renderBarLine(
      { label: 'enqueue', unit: 'lines', done: 300, total: undefined, elapsedMs: 3_000 },
      80,
    );
    const plain = renderPlainLine({
      label: 'enqueue',
      unit: 'lines',
      done: 300,
      total: undefined,
      elapsedMs: 3_000,
    });

    // Assess
    expect(bar).toBe('enqueue: 300 lines 100/s');
    expect(plain).toBe('enqueue: 300 lines 100/s');
  });

  it('shows no rate for a run shorter than a second (no "20000/s in 0:00")', () => {
    // Act
    const snapshot = { label: 'redrive', unit: 'messages', done: 100, total: 100, elapsedMs: 5 };
    const plain = renderPlainLine(snapshot, true);
    const bar = renderBarLine(snapshot, 80, true);

    // Assess
    expect(plain).toBe('redrive: 100/100 messages 100% in 0:00');
    expect(bar).not.toMatch(/\/s/);
    expect(bar).toMatch(/100% 100\/100 messages in 0:00$/);
  });

  it('shows a detail such as counts by status after the counts, on the bar and in plain lines', () => {
    // Prepare
    const s = {
      label: 'wait',
      unit: 'records',
      done: 50,
      total: 200,
      elapsedMs: 10_000,
      detail: 'submitted 48, failed 2',
    };
    // Act
    const bar = renderBarLine(s, 120);
    const plain = renderPlainLine(s);
    // Assess
    expect(bar).toMatch(/^wait \[#+-+\] {2}25% 50\/200 records \(submitted 48, failed 2\) 5\.0\/s ETA 0:30$/);
    expect(plain).toBe('wait: 50/200 records 25% (submitted 48, failed 2) 5.0/s ETA 0:30');
  });
});
