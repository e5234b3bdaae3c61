#!/usr/bin/env python3
"""What gpuplan's analytic GEMM model (cost::gemm_shape_factor, CostModel::gemm_time; H100 SXM from
calibration/systems/h100-sxm.toml: 132 SMs, bf16 peak 989.4 TFLOP/s, gemm_max_fraction 0.725,
HBM 3.35 TB/s x 0.905, kernel_overhead 1 us) charges a grouped expert GEMM of E experts of M rows
(the megatron stack's CostModel::grouped_gemm_time), against the measured torch._grouped_mm rows of
calibration/runs/raw/grouped-gemm-h100-2026-11-24/grouped_gemm_probe.csv. A re-implementation in
Python of the Rust formula (tile 128 x 256 on Hopper, K ramp 128, split-K below one wave), no profile.
Usage: python3 scripts/grouped_gemm_compare.py > calibration/runs/raw/grouped-gemm-h100-2026-11-24/compare.txt
"""
import csv,math
def nxt(x):
    p=1
    while p<x: p*=2
    return p
def raw(m,n,k,c,sms=132):
    bm,bn=128,256
    fit=lambda d,b: b if d>=b else max(nxt(d),16)
    tm,tn=fit(m,bm),fit(n,bn)
    tiles=-(-m//tm)*-(-n//tn)*c
    split=min(sms//tiles,max(k//256,1)) if tiles<sms else 1
    work=tiles*split; waves=-(-work//sms)
    we=work/(waves*sms); pad=(m*n)/((-(-m//tm)*tm)*(-(-n//tn)*tn)); ks=k/split
    return we*pad*(ks/(ks+128))
def model_us(m,n,k,c,peak=989.4e12,gmax=0.725,hbm=3.35e12*0.905):
    eff=min(raw(m,n,k,c)/raw(8192,8192,8192,1)*gmax,1)
    comp=2*m*n*k*c/(peak*eff)
    mem=((m*k+k*n)*2*c+m*n*c*2)/hbm
    return (max(comp,mem)+1e-6)*1e6, eff
rows=list(csv.DictReader(open('calibration/runs/raw/grouped-gemm-h100-2026-11-24/grouped_gemm_probe.csv')))
print("pass K N M | measured grouped us (eff) | dense(E*M) us | model us (eff) | model/measured")
for r in rows:
    if r['method']!='grouped': continue
    E,M,K,N=int(r['E']),int(r['M']),int(r['K']),int(r['N'])
    p=r['pass']
    # model's (m,n,k) of each pass as lowered: fprop (M,N,K); dgrad (M,K,N); wgrad (K,N,M)
    m,n,k={'fprop':(M,N,K),'dgrad':(M,K,N),'wgrad':(K,N,M)}[p]
    mu,eff=model_us(m,n,k,E)
    g=float(r['gpu_us'])
    d=[x for x in rows if x['method']=='dense' and x['pass']==p and x['M']==r['M'] and x['K']==r['K'] and x['N']==r['N']][0]
    print(f"{p} {K} {N} {M:5d} | {g:7.1f} ({float(r['tflops'])/989.4:.2f}) | {float(d['gpu_us']):7.1f} | {mu:7.1f} ({eff:.2f}) | {mu/g:.2f}")
