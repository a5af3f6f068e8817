import { describe, expect, it } from 'vitest';
import { type ChartInput, escapeXml, renderChart, stepPoints, tickStep } from '../../../bench/svg.js';

function chart(overrides: Partial<ChartInput> = {}): ChartInput {
  return {
    title: 'bench',
    series: [
      { t: 0, inFlight: 0, invocations: 2, cap: 4, planThreads: 5 },
      { t: 1, inFlight: 3, invocations: 4, cap: 4, planThreads: 5 },
      { t: 2, inFlight: 4, invocations: 4, cap: 4, planThreads: 5 },
      { t: 3, inFlight: 1, invocations: 1, cap: 4, planThreads: 5 },
    ],
    outcomes: [
      { t: 0, counts: {} },
      { t: 1, counts: { submitted: 2 } },
      { t: 2, counts: { submitted: 3, failed: 1 } },
    ],
    bucketSeconds: 1,
    ...overrides,
  };
}

describe('renderChart', () => {
  it('writes a standalone SVG document with one step line per series', () => {
    // Act
    const svg = renderChart(chart());

    // Assess
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    for (const series of ['plan', 'cap', 'invocations', 'inflight']) {
      expect(svg).toContain(`data-series="${series}"`);
    }
  });

  it('stacks one bar per outcome kind and bucket, only for non-zero counts', () => {
    // Act
    const svg = renderChart(chart());

    // Assess
    expect(svg.match(/data-kind="submitted"/g)).toHaveLength(2);
    expect(svg.match(/data-kind="failed"/g)).toHaveLength(1);
  });

  it('shades the steady-state window when given', () => {
    // Act
    const withWindow = renderChart(chart({ window: { from: 1, to: 2 } }));
    const without = renderChart(chart());

    // Assess
    expect(withWindow).toContain('<title>steady state</title>');
    expect(without).not.toContain('<title>steady state</title>');
  });

  it('escapes text it is given', () => {
    // Act
    const svg = renderChart(chart({ title: 'a <b> & "c"', subtitle: "it's" }));

    // Assess
    expect(svg).toContain('a &lt;b&gt; &amp; &quot;c&quot;');
    expect(svg).toContain('it&apos;s');
    expect(svg).not.toContain('<b>');
  });

  it('still renders axes for a run without samples or outcomes', () => {
    // Act
    const svg = renderChart(chart({ series: [], outcomes: [] }));

    // Assess
    expect(svg).toContain('</svg>');
    expect(svg).not.toContain('<polyline');
    expect(svg).not.toContain('NaN');
  });

  it('never writes NaN coordinates', () => {
    // Act
    const svg = renderChart(chart({ window: { from: 0.5, to: 2.5 } }));

    // Assess
    expect(svg).not.toContain('NaN');
  });
});

describe('stepPoints', () => {
  it('holds each value until the next change and drops repeats', () => {
    // Prepare
    const samples = [
      { t: 0, v: 1 },
      { t: 1, v: 1 },
      { t: 2, v: 3 },
      { t: 3, v: 3 },
    ];

    // Act
    const points = stepPoints(samples);

    // Assess
    expect(points).toEqual([
      { t: 0, v: 1 },
      { t: 2, v: 1 },
      { t: 2, v: 3 },
      { t: 3, v: 3 },
    ]);
  });
});

describe('tickStep / escapeXml', () => {
  it.each([
    [100, 8, 20],
    [100, 10, 10],
    [7, 8, 1],
    [300, 8, 50],
    [0, 8, 1],
  ])(
    'picks the smallest 1-2-5 step that divides a range of %d into at most %d intervals: %d',
    (range, target, step) => {
      // Act / Assess
      expect(tickStep(range, target)).toBe(step);
    },
  );

  it('escapes the five XML special characters', () => {
    // Act / Assess
    expect(escapeXml(`<&>"'`)).toBe('&lt;&amp;&gt;&quot;&apos;');
  });
});
