import { fileURLToPath } from 'node:url';
import { type Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';

/** The repository root: entries, package-lock.json and tsconfig.json are resolved from here. */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface BundledFunctionProps {
  /** Explicit, stack-derived name (IAM policies build ARNs from it without a reference cycle). */
  readonly functionName: string;
  /** Handler file relative to the repository root, exporting `handler`. */
  readonly entry: string;
  readonly description: string;
  readonly timeout: Duration;
  readonly environment: Record<string, string>;
  readonly logRetentionDays: number;
  /** @default 256 */
  readonly memorySize?: number;
  /** @default none */
  readonly reservedConcurrentExecutions?: number;
}

/**
 * A Lambda function as threadgate builds them: Node.js 22 on arm64, bundled locally by esbuild
 * with every dependency inside (`externalModules: []`, so the asset runs from any folder,
 * including the local runtime), source maps on, its own role (no managed policies) and its
 * own log group with a retention.
 */
export class BundledFunction extends Construct {
  readonly fn: nodejs.NodejsFunction;
  readonly role: iam.Role;
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: BundledFunctionProps) {
    super(scope, id);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      logGroupName: `/aws/lambda/${props.functionName}`,
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `Execution role of ${props.functionName}`,
    });
    // Only its own log group: CreateLogStream/PutLogEvents on log-group:NAME:*.
    this.logGroup.grantWrite(this.role);

    this.fn = new nodejs.NodejsFunction(this, 'Function', {
      functionName: props.functionName,
      description: props.description,
      entry: `${REPO_ROOT}${props.entry}`,
      handler: 'handler',
      projectRoot: REPO_ROOT,
      depsLockFilePath: `${REPO_ROOT}package-lock.json`,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: props.memorySize ?? 256,
      timeout: props.timeout,
      role: this.role,
      logGroup: this.logGroup,
      reservedConcurrentExecutions: props.reservedConcurrentExecutions,
      // Stack traces point into the TypeScript sources through the bundled source maps.
      environment: { ...props.environment, NODE_OPTIONS: '--enable-source-maps' },
      bundling: {
        externalModules: [],
        format: nodejs.OutputFormat.CJS,
        target: 'node22',
        minify: true,
        sourceMap: true,
        sourcesContent: false,
        forceDockerBundling: false,
      },
    });
  }
}
