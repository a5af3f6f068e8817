import { ArnFormat, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';

export interface PipelineStateProps {
  /** Stack-derived prefix of the parameter name. */
  readonly stackName: string;
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

  constructor(scope: Construct, id: string, props: PipelineStateProps) {
    super(scope, id);
    this.parameter = new ssm.StringParameter(this, 'Parameter', {
      parameterName: `/${props.stackName}/pipeline-state`,
      stringValue: INITIAL_PIPELINE_STATE,
      description:
        'threadgate pipeline state: JSON {paused, reason, code, since, by}; resume only with `threadgate resume`',
    });
  }

  /** Read and write this one parameter (GetParameter, PutParameter). */
  grantReadWrite(grantee: iam.IGrantable): void {
    iam.Grant.addToPrincipal({
      grantee,
      actions: ['ssm:GetParameter', 'ssm:PutParameter'],
      resourceArns: [this.parameter.parameterArn],
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
