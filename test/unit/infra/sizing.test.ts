import { readFileSync } from 'node:fs';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { readReportFile } from '../../../bench/bill/markdown.js';
import { PLAN_SIZES, SIZING_DOC, sizingRow, sizingSources } from '../../../bench/bill/sizing.js';
import { computeCap } from '../../../functions/pipeline/cap-policy.js';
import { laneShape, readLaneSettings } from '../../../functions/pipeline/lanes.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { Threadgate, type ThreadgateProps } from '../../../infra/threadgate.js';

/**
 * docs/deploying.md's construct example, deployed for a 100- and a 1,000-thread plan, runs the
 * plan as the sizing table's row says: the memory and `maxCap` are in the template; the first
 * deploy holds `initialCap`'s shape (the worker's first shape), and what the cap adjuster publishes on its first run is
 * laneShape of computeCap (the functions the adjuster calls), which the template cannot show.
 */
const DOC = readFileSync(`${PACKAGE_ROOT}${SIZING_DOC}`, 'utf8');
const REPORTS = sizingSources(DOC).map((path) => ({ path, report: readReportFile(path) }));

/** The example's props as the page writes them (its `lanes` and `reserve`). */
function exampleProps(): ThreadgateProps {
  const example = DOC.slice(DOC.indexOf('## A. In your CDK app'));
  const block = /new Threadgate\(this, 'Gate', \{([\s\S]*?)\}\);/.exec(example)?.[1] ?? '';
  const number = (name: string) => Number(new RegExp(`^\\s*${name}: (\\d+),`, 'm').exec(block)?.[1]);
  expect(block).toContain("allowedHosts: ['forms.example.com']");
  return { allowedHosts: ['forms.example.com'], reserve: number('reserve'), lanes: number('lanes') };
}

function synth(props: ThreadgateProps) {
  const stack = new Stack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Consumer');
  const gate = new Threadgate(stack, 'Gate', props);
  const template = Template.fromStack(stack);
  const [workerId, worker] =
    Object.entries(template.findResources('AWS::Lambda::Function')).find(
      ([, r]) => r.Properties.FunctionName === 'Consumer-worker',
    ) ?? [];
  const mapping = Object.values(template.findResources('AWS::Lambda::EventSourceMapping')).find(
    (r) => JSON.stringify(r.Properties.FunctionName) === JSON.stringify({ Ref: workerId }),
  );
  return {
    gate,
    reserved: worker?.Properties.ReservedConcurrentExecutions as number,
    memory: worker?.Properties.MemorySize as number,
    mappingMaximum: mapping?.Properties.ScalingConfig?.MaximumConcurrency as number,
    // The shape the worker runs until the adjuster publishes one, read from its environment as it reads it.
    firstShape: readLaneSettings(worker?.Properties.Environment.Variables).firstShape,
  };
}

describe.each([100, 1000])("the deploying page's example on a %i-thread plan", (planThreads) => {
  const size = PLAN_SIZES.find((s) => s.planThreads === planThreads)!;
  const row = sizingRow(size, REPORTS);

  it("sets the row's lanes and deploys its memory, with maxCap no lower than the plan's cap", () => {
    const props = exampleProps();
    expect(props.lanes).toBe(row.lanes);
    const { gate, memory } = synth(props);
    expect(memory).toBe(row.memoryMb);
    expect(gate.config.maxCap).toBeGreaterThanOrEqual(planThreads - gate.config.reserve);
  }, 60_000);

  it("reaches the row's r × L when the adjuster first runs (laneShape of computeCap; the template holds initialCap's shape)", () => {
    const { gate, reserved, mappingMaximum, firstShape } = synth(exampleProps());
    const initial = laneShape(gate.config.initialCap, gate.config.lanes);
    expect({ reserved, mappingMaximum, firstShape }).toEqual({
      reserved: initial.r,
      mappingMaximum: initial.r,
      firstShape: { ...initial, since: 0 },
    });
    const published = laneShape(computeCap(planThreads, gate.config), gate.config.lanes);
    expect(published).toEqual(row.shape);
    expect(row.lambdaQuota).toBe(published.r + 100);
  }, 60_000);

  it("deploys the row's r as reserved concurrency and mapping maximum when initialCap is the plan's cap", () => {
    const props = exampleProps();
    const { reserved, mappingMaximum, firstShape } = synth({
      ...props,
      initialCap: planThreads - (props.reserve ?? 1),
    });
    expect({ reserved, mappingMaximum }).toEqual({ reserved: row.shape.r, mappingMaximum: row.shape.r });
    expect(firstShape).toEqual({ ...row.shape, since: 0 });
  }, 60_000);
});
