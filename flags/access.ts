/**
 * Reading and writing an environment's desired flag values at its provider: the file of the file provider
 * or the Unleash admin API. One shape for both, so `workbench flags set` and a promotion change flags the
 * same way whichever provider an environment uses.
 */
import { flagsFile, readFlagsFile, readShadowFlags, writeFlagsFile } from './file-store.js';
import type { FlagKey, FlagValues } from './registry.js';
import {
  readUnleashFlags,
  readUnleashShadow,
  setUnleashFlag,
  type UnleashAdminOptions,
} from './unleash-admin.js';

export interface FlagsAccess {
  kind: 'file' | 'unleash';
  read(): Promise<FlagValues>;
  /** The flags at "shadow" (docs/flags.md § Shadow); `read` has them false (what serves). */
  readShadow(): Promise<FlagKey[]>;
  /** Writes on or off, or, with `shadow` (and `on` false), shadow. */
  write(flag: FlagKey, on: boolean, shadow?: boolean): Promise<void>;
  /** Where the values live, for messages. */
  describe: string;
}

export function fileFlagsAccess(dir: string, environment: string): FlagsAccess {
  const path = flagsFile(dir, environment);
  return {
    kind: 'file',
    describe: path,
    read: async () => readFlagsFile(path),
    readShadow: async () => readShadowFlags(path),
    // The other flags' shadow stays as the file has it; the flag written is on, off or shadow now.
    write: async (flag, on, shadow = false) =>
      writeFlagsFile(path, { ...readFlagsFile(path), [flag]: on && !shadow }, [
        ...readShadowFlags(path).filter((key) => key !== flag),
        ...(shadow ? [flag] : []),
      ]),
  };
}

export function unleashFlagsAccess(admin: UnleashAdminOptions): FlagsAccess {
  return {
    kind: 'unleash',
    describe: `${admin.url} (Unleash environment ${admin.environment})`,
    read: () => readUnleashFlags(admin),
    readShadow: () => readUnleashShadow(admin),
    write: (flag, on, shadow = false) => setUnleashFlag(admin, flag, on, shadow),
  };
}
