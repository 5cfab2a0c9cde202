//! CUDA device memory as a sink (`cargo test -p tensorfmt-tests --features cuda --test
//! cuda`): batches of the Caffe2 input pipeline and tensors of a file reach the device
//! byte for byte. Without a CUDA driver or device each test says so and passes.
#![cfg(feature = "cuda")]

use tensorfmt::runtime::cuda::CudaSink;

fn sink() -> Option<CudaSink> {
    match CudaSink::new(0) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("skipping: no CUDA device ({e})");
            None
        }
    }
}

#[test]
fn tensors_of_a_file_reach_the_device_byte_for_byte() {
    let Some(mut s) = sink() else { return };
    let f = tensorfmt::TensorFile::open(tensorfmt_tests::fixtures().join("onnx/mlp.onnx")).unwrap();
    f.read_all(&mut s).unwrap();
    let on_device = s.finish().unwrap();
    assert_eq!(on_device.len(), f.tensors().len());
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    for (t, d) in f.tensors().iter().zip(&on_device) {
        let back = stream.clone_dtoh(&d.data).unwrap();
        assert_eq!(
            &back[..t.location.len() as usize],
            f.load_info(t).unwrap().data.as_bytes()
        );
    }
}

#[test]
fn pipeline_batches_reach_the_device() {
    let Some(mut s) = sink() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = tensorfmt_tests::fixtures().join("caffe2/dataset.minidb");
    let p = tmp.path().join("d.minidb");
    std::fs::copy(&src, &p).unwrap();
    let opts = tensorfmt::caffe2::DbInputOptions {
        batch_size: 4,
        epochs: Some(1),
        ..Default::default()
    };
    let cpu: Vec<_> = tensorfmt::caffe2::DbInput::open(&p, &opts)
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    let mut input = tensorfmt::caffe2::DbInput::open(&p, &opts).unwrap();
    while let Some(r) = input.next_into(&mut s) {
        r.unwrap();
    }
    let on_device = s.finish().unwrap();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let flat: Vec<&tensorfmt::Tensor> = cpu.iter().flat_map(|b| b.tensors.iter()).collect();
    assert_eq!(on_device.len(), flat.len());
    for (c, d) in flat.iter().zip(&on_device) {
        let back = stream.clone_dtoh(&d.data).unwrap();
        assert_eq!(&back[..c.data.as_bytes().len()], c.data.as_bytes());
    }
}
