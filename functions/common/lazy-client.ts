/**
 * An AWS SDK client given as itself or as a factory that makes it on first use. The worker holds
 * clients that serve rare paths (the pause's Lambda client, the secret read once per
 * environment) as factories that import their SDK module on first use: a module not imported is
 * neither evaluated nor compiled, which keeps it out of the execution environment's memory
 * (docs/benchmark-notes.md "Worker memory"). Callers that hold a client anyway pass it as it is.
 */
export type LazyClient<T> = T | (() => Promise<T>);

/** The client, made (once per factory: the factory memoizes, see `lazyClient`) when it is a factory. */
export function clientOf<T>(client: LazyClient<T>): Promise<T> {
  return typeof client === 'function' ? (client as () => Promise<T>)() : Promise.resolve(client);
}

/** A factory that makes its client once; a failed make is not kept, so the next use tries again. */
export function lazyClient<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => {
    made ??= make().catch((err: unknown) => {
      made = undefined;
      throw err;
    });
    return made;
  };
}
