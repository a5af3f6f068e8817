import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import { type Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';

import { PACKAGE_ROOT } from '../package-root.js';

/** The repository (or installed package) root: entries, package-lock.json and tsconfig.json are resolved from here. */
export const REPO_ROOT = PACKAGE_ROOT;

/** The Lambda entries `npm pack` bundles ahead of time (infra/bundle-functions.ts), by bundle name. */
export const FUNCTION_ENTRIES = {
  worker: 'functions/worker.ts',
  'cap-adjuster': 'functions/cap-adjuster.ts',
  'outcome-publisher': 'functions/outcome-publisher.ts',
} as const;

/** Where the prebundled code of `entry` is in an installed package: dist/lambda/<name>/index.js. */
export function prebundledDir(entry: string, root = REPO_ROOT): string {
  return `${root}dist/lambda/${basename(entry, '.ts')}`;
}

/**
 * esbuild's settings for every function, for both ways of building the code: NodejsFunction in a
 * checkout and the prepack bundle of the published package.
 */
export const LAMBDA_BUNDLING = {
  format: 'cjs',
  target: 'node22',
  minify: true,
  sourceMap: true,
  sourcesContent: false,
} as const;

/**
 * glibc's malloc settings for every function's Node process (read by glibc at process start, so
 * they work on Lambda's managed runtime). By default glibc raises its trim and mmap thresholds
 * after large frees and keeps up to 8 arenas per core: the memory V8 frees after parsing and
 * compiling a 1.8 MB bundle stays resident, and the environment's peak RSS, which Lambda counts
 * against its memory, is about 20 MB higher (docs/benchmark-notes.md "Worker memory": 105-109 MB
 * against 83-87 MB at load under the 128 MB flags). A fixed trim threshold (glibc's own default
 * value, no longer raised) returns freed memory at the top of the heap; two arenas are enough
 * for Node's few threads.
 */
export const GLIBC_MALLOC_ENV = { MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: '131072' } as const;

export interface BundledFunctionProps {
  /** Explicit, stack-derived name (IAM policies build ARNs from it without a reference cycle). */
  readonly functionName: string;
  /** Handler file relative to the repository root, exporting `handler`. */
  readonly entry: string;
  readonly description: string;
  readonly timeout: Duration;
  readonly environment: Record<string, string>;
  readonly logRetentionDays: number;
  /** Powertools' log level (POWERTOOLS_LOG_LEVEL): the stack's `logLevel` setting. */
  readonly logLevel: string;
  /** @default 256 */
  readonly memorySize?: number;
  /** @default none */
  readonly reservedConcurrentExecutions?: number;
  /**
   * NODE_OPTIONS=--enable-source-maps: stack traces point into the TypeScript sources, and Node
   * parses the bundle's source map when the module loads. The bundle keeps its map either way
   * (a trace can be mapped offline). @default true
   */
  readonly runtimeSourceMaps?: boolean;
}

/**
 * A Lambda function as threadgate builds them: Node.js 22 on arm64, bundled by esbuild with
 * every dependency inside (`externalModules: []`, so the asset runs from any folder, including
 * the local runtime), source maps on, its own role (no managed policies) and its own log group
 * with a retention. In a checkout (the TypeScript entry exists) NodejsFunction bundles it at
 * synth; in the installed package the entry is absent and the bundle `npm pack` made is used
 * as it is, so a consumer needs neither the sources nor esbuild.
 */
export class BundledFunction extends Construct {
  readonly fn: lambda.Function;
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

    const common = {
      functionName: props.functionName,
      description: props.description,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: props.memorySize ?? 256,
      timeout: props.timeout,
      role: this.role,
      logGroup: this.logGroup,
      reservedConcurrentExecutions: props.reservedConcurrentExecutions,
      environment: {
        ...props.environment,
        POWERTOOLS_LOG_LEVEL: props.logLevel,
        ...GLIBC_MALLOC_ENV,
        // Stack traces point into the TypeScript sources through the bundled source maps.
        ...(props.runtimeSourceMaps === false ? {} : { NODE_OPTIONS: '--enable-source-maps' }),
      },
    };
    const source = `${REPO_ROOT}${props.entry}`;
    if (existsSync(source)) {
      this.fn = new nodejs.NodejsFunction(this, 'Function', {
        ...common,
        entry: source,
        handler: 'handler',
        projectRoot: REPO_ROOT,
        depsLockFilePath: `${REPO_ROOT}package-lock.json`,
        bundling: {
          ...LAMBDA_BUNDLING,
          format: nodejs.OutputFormat.CJS,
          externalModules: [],
          forceDockerBundling: false,
        },
      });
      return;
    }
    const bundle = prebundledDir(props.entry);
    if (!existsSync(`${bundle}/index.js`)) {
      throw new Error(
        `threadgate: neither ${props.entry} nor its prebundled code (${bundle}/index.js) exists; reinstall the package`,
      );
    }
    this.fn = new lambda.Function(this, 'Function', {
      ...common,
      code: lambda.Code.fromAsset(bundle),
      handler: 'index.handler',
    });
  }
}
