import { ArnFormat, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { laneShape } from '../../functions/pipeline/lanes.js';

export interface PipelineStateProps {
  /** Stack-derived prefix of the parameter name. */
  readonly stackName: string;
  /** With more than one lane per worker invocation: the lane-shape parameter is made, starting at initialCap's shape. */
  readonly lanes?: number;
  /** The cap deployed before the adjuster's first run (its shape is the parameter's first value). */
  readonly initialCap?: number;
}

/** The state a fresh deployment starts in. */
export const INITIAL_PIPELINE_STATE = JSON.stringify({ paused: false });

/**
 * The pipeline-state SSM parameter (JSON `{paused, reason, code, since, by}`, see
 * functions/pipeline/control.ts) and the permissions to pause the pipeline.
 * CloudFormation only writes the parameter when the template's value changes, so a
 * stack update does not clear a pause an operator or the worker recorded.
 */
export class PipelineState extends Construct {
  readonly parameter: ssm.StringParameter;
  /**
   * With lanes: where the cap adjuster publishes {cap, r, L} (functions/pipeline/lanes.ts) and the
   * worker reads it with the state, in one GetParameters.
   */
  readonly laneShape?: ssm.StringParameter;

  constructor(scope: Construct, id: string, props: PipelineStateProps) {
    super(scope, id);
    this.parameter = new ssm.StringParameter(this, 'Parameter', {
      parameterName: `/${props.stackName}/pipeline-state`,
      stringValue: INITIAL_PIPELINE_STATE,
      description:
        'threadgate pipeline state: JSON {paused, reason, code, since, by}; resume only with `threadgate resume`',
    });
    if (props.lanes !== undefined && props.lanes > 1) {
      const first = laneShape(props.initialCap ?? 1, props.lanes);
      this.laneShape = new ssm.StringParameter(this, 'LaneShape', {
        parameterName: `/${props.stackName}/lane-shape`,
        stringValue: JSON.stringify({ ...first, since: 0 }),
        description: 'threadgate lane shape: JSON {cap, r, L, since, drain?}, published by the cap adjuster',
      });
    }
  }

  /** Read and write the state parameter (GetParameter, PutParameter). */
  grantReadWrite(grantee: iam.IGrantable): void {
    iam.Grant.addToPrincipal({
      grantee,
      actions: ['ssm:GetParameter', 'ssm:PutParameter'],
      resourceArns: [this.parameter.parameterArn],
    });
  }

  /** The worker's read of the state and the lane shape in one call (GetParameters on both); nothing without lanes. */
  grantReadWithShape(grantee: iam.IGrantable): void {
    if (!this.laneShape) return;
    iam.Grant.addToPrincipal({
      grantee,
      actions: ['ssm:GetParameters'],
      resourceArns: [this.parameter.parameterArn, this.laneShape.parameterArn],
    });
  }

  /** The adjuster's read and write of the lane shape (GetParameter, PutParameter); nothing without lanes. */
  grantShapeReadWrite(grantee: iam.IGrantable): void {
    if (!this.laneShape) return;
    iam.Grant.addToPrincipal({
      grantee,
      actions: ['ssm:GetParameter', 'ssm:PutParameter'],
      resourceArns: [this.laneShape.parameterArn],
    });
  }

  /**
   * Lets `role` find, read and update (disable; the adjuster also resizes) ONE event source
   * mapping. This must be a separate policy, not the role's default policy: the function
   * depends on its role's default policy, and the mapping depends on the function, so a
   * default-policy statement naming the mapping would be a dependency cycle.
   * ListEventSourceMappings supports no resource-level permission, hence its `*`.
   */
  grantMappingControl(scope: Construct, id: string, role: iam.IRole, mappingUuid: string): iam.Policy {
    const mappingArn = Stack.of(scope).formatArn({
      service: 'lambda',
      resource: 'event-source-mapping',
      resourceName: mappingUuid,
      arnFormat: ArnFormat.COLON_RESOURCE_NAME,
    });
    return new iam.Policy(scope, id, {
      roles: [role],
      statements: [
        new iam.PolicyStatement({
          sid: 'ThisMappingOnly',
          actions: ['lambda:GetEventSourceMapping', 'lambda:UpdateEventSourceMapping'],
          resources: [mappingArn],
        }),
        new iam.PolicyStatement({
          sid: 'FindMapping',
          actions: ['lambda:ListEventSourceMappings'],
          resources: ['*'],
        }),
      ],
    });
  }
}
