// PTX test kernels shared by the backend conformance suite (every backend)
// and the cuda backend's GPU tests.
#pragma once

namespace phos::backend::testing {

// A hand-written PTX module: saxpy (y = a*x + y over n floats), a global
// initialised to 7, and a kernel that increments it. `.target sm_90` JITs on
// Hopper and newer.
inline constexpr char kSaxpyPtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .global .align 4 .u32 phos_counter = 7;

.visible .entry saxpy(
    .param .u64 saxpy_param_x,
    .param .u64 saxpy_param_y,
    .param .f32 saxpy_param_a,
    .param .u32 saxpy_param_n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [saxpy_param_x];
    ld.param.u64 %rd2, [saxpy_param_y];
    ld.param.f32 %f1, [saxpy_param_a];
    ld.param.u32 %r1, [saxpy_param_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}

.visible .entry bump()
{
    .reg .b32 %r<3>;

    ld.global.u32 %r1, [phos_counter];
    add.u32 %r2, %r1, 1;
    st.global.u32 [phos_counter], %r2;
    ret;
}
)PTX";

// A module whose kernel uses an instruction the sim's interpreter does not
// run (sust.p, a formatted surface store): the sim must refuse it by name,
// never run it wrong.
inline constexpr char kFormattedSurfaceStorePtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .entry surface_store(.param .u64 out, .param .u64 surf)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd3, [surf];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 4;
    sust.p.1d.b32.trap [%rd3, {%r1}], {%r1};
    st.global.u32 [%rd2], %r1;
    ret;
}
)PTX";

}  // namespace phos::backend::testing
