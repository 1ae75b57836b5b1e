from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic


@intrinsic
def rdtsc(typingctx):
    sig = types.int64()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen
